"""Merge the ranks' sidecars (``rank{r}.meta.json``) of a capture directory into ``run.json``.

``tracekit record`` calls ``write_manifest`` after the job exits; jobs captured with
``collectors.Capture`` call it themselves once every rank is done (e.g. from the launcher). A rank
is complete only if its sidecar says so and its trace file exists; a rank with no sidecar, or one
still saying ``capturing`` (it died inside the window), is listed as incomplete with the reason.
A sidecar that does not match its schema is reported and treated as missing.
Standard library only; never reads the traces themselves. The schema is ``collectors.manifest``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from collectors.aside import describe_runs, runs_in
from collectors.files import read_json, write_json_atomic
from collectors.hooks import RECOGNIZED
from collectors.manifest import (
    INCOMING_PREFIX,
    MANIFEST_NAME,
    SIDECAR,
    EvalSteps,
    Interruption,
    Manifest,
    RankEntry,
    RankMeta,
    RunSteps,
    StageWork,
    parse_rank_meta,
    trace_name,
)

T = TypeVar("T")

_WHY_INCOMPLETE: dict[str, str] = {
    "partial": "the capture stopped inside the window; the trace holds fewer steps than requested",
    "failed": "the collector could not write this rank's trace",
}

NOTHING_CAPTURED = (
    "the job finished but no pipeline schedule tracekit recognizes ran in the capture window, so "
    "nothing was captured. tracekit recognizes: {recognized}. For a custom training loop, mark its "
    "steps and actions with collectors.Capture and collectors.mark (docs/labels.md)"
)
"""What run.json and ``tracekit record`` say when a successful job left no sidecar at all."""


def nothing_captured_message() -> str:
    """NOTHING_CAPTURED with what the collectors recognize filled in."""
    return NOTHING_CAPTURED.format(recognized="; ".join(RECOGNIZED))


def _not_reached(meta: RankMeta) -> str:
    seen = 0 if meta.steps is None else meta.steps.seen
    first = None if meta.steps is None else meta.steps.requested[0]
    ran = f"the job ran {seen} training steps"
    if meta.eval_calls.seen:
        ran += f" (and {meta.eval_calls.seen} forward-only calls, which are not training steps)"
    return f"{ran}, but the capture window starts at step {first}: no step was captured"


def _clock(unix_ns: int | None) -> str:
    return "?" if unix_ns is None else time.strftime("%H:%M:%S UTC", time.gmtime(unix_ns / 1e9))


def _died(meta: RankMeta) -> str:
    """Why a rank whose sidecar still says ``capturing`` has no trace."""
    steps = meta.steps
    done = 0 if steps is None else steps.captured[1] - steps.captured[0]
    last = None if steps is None else steps.last_end_unix_ns
    since = (
        f"after its last step ended at {_clock(last)}"
        if last
        else f"after its window opened at {_clock(meta.started_unix_ns)}"
    )
    return (
        f"the rank (pid {meta.pid} on {meta.host}) died during step #{done} of the window, {since}: "
        "killed by a signal it could not catch (SIGKILL, the OOM killer) or crashed; its trace is lost"
    )


def _rank_entry(rank: int, meta: RankMeta | None, out_dir: Path) -> RankEntry:
    if meta is None:
        return RankEntry(
            rank=rank,
            complete=False,
            trace=None,
            stages=None,
            host=None,
            status="missing",
            problems=("no sidecar: the rank never reached the capture window, or died before it",),
        )
    trace, status = meta.trace, meta.status
    problems = list(meta.problems)
    if status == "capturing":
        # Killed between writing its trace and its sidecar: the trace (written atomically) is whole.
        written = [
            name for name in (trace_name(rank, True), trace_name(rank, False)) if (out_dir / name).is_file()
        ]
        if written:
            trace = written[0]
            status = "complete" if trace == trace_name(rank, True) else "partial"
            problems.insert(0, f"the rank died after writing {trace}, before its sidecar said so")
        else:
            problems.insert(0, _died(meta))
    exists = trace is not None and (out_dir / trace).is_file()
    complete = status == "complete" and exists
    if status == "not-reached":
        problems.insert(0, _not_reached(meta))
    elif status in _WHY_INCOMPLETE:
        problems.insert(0, _WHY_INCOMPLETE[status])
    elif not complete and status != "capturing":
        problems.insert(0, f"trace file {trace} is missing")
    return RankEntry(
        rank=rank,
        complete=complete,
        trace=trace if exists else None,
        stages=None if meta.schedule is None else meta.schedule.stages,
        host=meta.host,
        status=status,
        problems=tuple(problems),
        unfinished_step=None if meta.steps is None else meta.steps.unfinished,
        interrupted_by=meta.interrupted_by,
    )


def _collector_problems(metas: dict[int, RankMeta]) -> tuple[str, ...]:
    """Each distinct collector problem once, with the ranks that met it."""
    ranks_of: dict[str, list[int]] = {}
    for rank, meta in sorted(metas.items()):
        for problem in meta.collector_problems:
            ranks_of.setdefault(problem, []).append(rank)
    return tuple(
        f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {problem}"
        for problem, ranks in ranks_of.items()
    )


def _agreed(values: list[T], what: str, problems: list[str]) -> T | None:
    distinct = [value for index, value in enumerate(values) if value not in values[:index]]
    if len(distinct) > 1:
        shown = [_plain(value) for value in distinct]
        problems.append(f"ranks disagree on {what}: {shown}")
    return distinct[0] if distinct else None


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def read_sidecars(out_dir: Path, run_id: str | None, problems: list[str]) -> dict[int, RankMeta]:
    """Rank -> its sidecar; unreadable, malformed or (when ``run_id`` is given) foreign ones are reported."""
    metas: dict[int, RankMeta] = {}
    for path in sorted(out_dir.iterdir()) if out_dir.is_dir() else []:
        match = SIDECAR.match(path.name)
        if match is None:
            continue
        try:
            meta = parse_rank_meta(read_json(path))
        except (OSError, ValueError) as error:  # SchemaError is a ValueError
            problems.append(f"unreadable sidecar {path.name}: {error}")
            continue
        if run_id is not None and meta.run_id != run_id:
            problems.append(f"ignored {path.name}: it belongs to another run")
            continue
        metas[int(match[1])] = meta
    return metas


def _stage_work(metas: dict[int, RankMeta], problems: list[str]) -> tuple[StageWork, ...] | None:
    """One work entry per stage from the ranks' schedules; a replica counting otherwise is a problem."""
    by_stage: dict[int, StageWork] = {}
    for rank, meta in sorted(metas.items()):
        for work in meta.schedule.stage_work if meta.schedule is not None else ():
            known = by_stage.setdefault(work.stage, work)
            if known != work:
                problems.append(
                    f"rank {rank} counts stage {work.stage}'s work as {work}, another rank as {known}"
                )
    return tuple(by_stage[stage] for stage in sorted(by_stage)) or None


def _pipeline_order(group: tuple[int, ...], first_stage: dict[int, int]) -> tuple[int, ...]:
    """``group`` in pipeline-rank order: by each member's first stage (its pipeline rank in every
    stage numbering the collectors record) when every member's is known and distinct, else as given."""
    firsts = [first_stage.get(rank) for rank in group]
    if None in firsts or len(set(firsts)) != len(group):
        return group
    return tuple(rank for _, rank in sorted(zip(firsts, group)))  # type: ignore[arg-type]


def _pipeline_groups(
    metas: dict[int, RankMeta], pp_size: int | None, problems: list[str]
) -> tuple[tuple[int, ...], ...] | None:
    """``merge_pipeline_groups`` of the groups and first stages the ranks' sidecars describe."""
    named = {
        rank: meta.schedule.pipeline_group
        for rank, meta in sorted(metas.items())
        if meta.schedule is not None and meta.schedule.pipeline_group is not None
    }
    first_stage = {
        rank: min(meta.schedule.stages)
        for rank, meta in metas.items()
        if meta.schedule is not None and meta.schedule.stages
    }
    return merge_pipeline_groups(named, first_stage, pp_size, problems)


def merge_pipeline_groups(
    named: dict[int, tuple[int, ...]], first_stage: dict[int, int], pp_size: int | None, problems: list[str]
) -> tuple[tuple[int, ...], ...] | None:
    """The pipelines the ranks' process groups form (``Manifest.pipeline_groups``), from rank -> its
    group (by group rank) and rank -> its first stage; None, with a problem, when a rank's group
    leaves it out, two groups overlap, or sizes disagree. Live mode merges its summaries' groups here too."""
    if not named:
        return None
    owner: dict[int, tuple[int, tuple[int, ...]]] = {}
    for rank, group in sorted(named.items()):
        if rank not in group or len(set(group)) != len(group):
            problems.append(
                f"rank {rank} names pipeline group {list(group)}, which leaves it out or repeats a rank"
            )
            return None
        for member in group:
            first, known = owner.setdefault(member, (rank, group))
            if set(known) != set(group):
                problems.append(
                    f"ranks disagree on pipeline groups: rank {first} puts rank {member} in "
                    f"{list(known)}, rank {rank} in {list(group)}"
                )
                return None
    distinct = {frozenset(group): group for group in named.values()}
    sizes = sorted({len(group) for group in distinct.values()})
    if len(sizes) > 1 or (pp_size is not None and sizes[0] != pp_size):
        of = "" if pp_size is None else f" for a schedule of {pp_size} pipeline ranks"
        problems.append(f"pipeline groups of {' and '.join(map(str, sizes))} ranks{of}")
        return None
    ordered = (_pipeline_order(group, first_stage) for group in distinct.values())
    return tuple(sorted(ordered, key=lambda group: group[0]))


def build_manifest(
    out_dir: Path,
    *,
    run_id: str | None = None,
    command: Sequence[str] | None = None,
    exit_code: int | None = None,
    interruption: Interruption | None = None,
    left_behind: int = 0,
    without_torch: Sequence[str] = (),
) -> Manifest:
    """The run.json contents for ``out_dir``; sidecars of another ``run_id`` (when given) are ignored.

    ``without_torch``: the job's Python interpreters that had no torch (and so captured nothing).
    """
    problems: list[str] = []
    runs = runs_in(out_dir)
    if len(runs) > 1:
        # Never declared complete: its figures would be of no real run (tracekit refuses it too).
        problems.append(f"two runs mixed in {out_dir}, so it is not one capture: {describe_runs(runs)}")
    metas = read_sidecars(out_dir, run_id, problems)
    known = [key for key in runs if key is not None]
    ours = run_id or (known[0] if len(known) == 1 else None)
    if ours is not None:
        # Staged ranks (collectors.Capture) that died or never reached the window left their
        # sidecars in the hidden incoming directory.
        staged = read_sidecars(out_dir / f"{INCOMING_PREFIX}{ours}", ours, problems)
        metas = {**staged, **metas}
    mixed = bool(problems) and problems[0].startswith("two runs mixed")
    world_size = max([meta.world_size for meta in metas.values()] + [max(metas, default=-1) + 1])
    if not metas and without_torch:
        problems.append(
            f"nothing was captured: the job ran under {', '.join(without_torch)}, which has no torch "
            "(install torch in the job's environment, e.g. pip install 'tracekit[collect]')"
        )
    elif not metas and exit_code == 0:
        problems.append(nothing_captured_message())
    elif not metas:
        problems.append(
            "no rank wrote a sidecar: the job failed before any step of a schedule tracekit recognizes"
        )
    ranks = tuple(_rank_entry(rank, metas.get(rank), out_dir) for rank in range(world_size))
    described = [meta.schedule for meta in metas.values() if meta.schedule is not None]
    schedule = _agreed([info.run_schedule() for info in described], "the schedule", problems)
    complete_steps = [
        meta.steps.captured for meta in metas.values() if meta.status == "complete" and meta.steps
    ]
    captured = _agreed(complete_steps, "steps", problems)
    requested = _agreed(
        [meta.steps.requested for meta in metas.values() if meta.steps is not None],
        "steps requested",
        problems,
    )
    left_out = max([meta.eval_calls.in_window for meta in metas.values()], default=0)
    notes = []
    if left_out:
        notes.append(
            f"{left_out} forward-only (evaluation) calls ran inside the capture window; they are not "
            "training steps and were left out: their forwards are unlabelled in the traces"
        )
    torch_version = _agreed([meta.torch_version for meta in metas.values()], "torch version", problems)
    return Manifest(
        run_id=run_id or (None if mixed else ours),
        complete=bool(ranks) and all(entry.complete for entry in ranks) and not mixed,
        mixed_runs=mixed,
        world_size=world_size,
        schedule=schedule,
        pp_size=None if schedule is None else schedule.pp_size,
        virtual_stages=None if schedule is None else schedule.num_stages // schedule.pp_size,
        microbatches=None if schedule is None else schedule.microbatches,
        rank_to_stages={
            rank: meta.schedule.stages for rank, meta in sorted(metas.items()) if meta.schedule is not None
        },
        stage_work=_stage_work(metas, problems),
        pipeline_groups=_pipeline_groups(metas, None if schedule is None else schedule.pp_size, problems),
        steps=RunSteps(requested=requested, captured=captured),
        eval_steps=EvalSteps(left_out=left_out),
        torch_version=torch_version,
        hosts=tuple(sorted({meta.host for meta in metas.values() if meta.host})),
        ranks=ranks,
        command=tuple(command) if command is not None else None,
        exit_code=exit_code,
        problems=tuple(problems),
        interruption=interruption,
        left_behind=left_behind,
        collector_problems=_collector_problems(metas),
        notes=tuple(notes),
        written_unix_ns=time.time_ns(),
    )


def write_manifest(
    out_dir: str | Path,
    *,
    run_id: str | None = None,
    command: Sequence[str] | None = None,
    exit_code: int | None = None,
) -> Manifest:
    """Merge the sidecars of ``out_dir`` into ``out_dir/run.json`` (atomically); returns what it wrote."""
    out_dir = Path(out_dir)
    manifest = build_manifest(out_dir, run_id=run_id, command=command, exit_code=exit_code)
    write_json_atomic(out_dir / MANIFEST_NAME, manifest.to_json())
    return manifest
