"""Which capture each trace file came from, and where a cut-off trace stops.

The collector writes a sidecar (``rank{r}.meta.json``) beside each rank's trace naming its run
(``run_id``), world size, schedule and the steps it holds. ``check_one_capture`` refuses a directory
whose traces come from more than one capture (two ``tracekit record`` runs copied together, a
dualpipev rank beside a 1f1b one): averaging them would give figures of no real run. ``cut_points``
finds, for each trace cut off by a signal or a crash, the start of its unfinished step
(``RankSteps.unfinished``): the analysis leaves out everything from there on, so a step that did
not finish is never counted.

Each trace also carries its run id itself (``collectors.aside.run_id_in``, read with its events:
``TraceInfo.run_id``), so traces of two
runs copied together without their sidecars are refused too. Traces with neither a sidecar nor a
run id (other tools' captures) are taken as they are. Not for reading the trace
events (``tracekit.trace.kineto``) nor for the manifest (``collectors.manifest``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import orjson
import polars as pl

from collectors.labels import step_label
from collectors.manifest import Manifest, RankMeta, SchemaError, parse_rank_meta, sidecar_name
from tracekit.errors import TracekitError

_COLLECTOR_TRACE = re.compile(r"^rank(?P<rank>\d+)(?P<partial>\.partial)?\.json(\.gz)?$")
"""A trace file name the collector writes; its sidecar is ``rank{rank}.meta.json`` beside it."""


@dataclass(frozen=True)
class Cut:
    """Where a rank's trace stops counting: the start of the step that did not finish."""

    rank: int
    step: int
    """Window-relative index n of the unfinished step (``tracekit:step#n``)."""
    start_ns: int
    """Events starting at or after this time (event table clock) are left out."""


def read_sidecars(files: list[Path]) -> dict[Path, RankMeta]:
    """Trace file -> its collector sidecar, for the files that have one; TracekitError on a malformed one."""
    metas: dict[Path, RankMeta] = {}
    for path in files:
        match = _COLLECTOR_TRACE.match(path.name)
        if match is None:
            continue
        sidecar = path.with_name(sidecar_name(int(match["rank"])))
        if not sidecar.is_file():
            continue
        try:
            metas[path] = parse_rank_meta(orjson.loads(sidecar.read_bytes()))
        except (OSError, orjson.JSONDecodeError, SchemaError) as error:
            raise TracekitError(f"unreadable sidecar ({error})", sidecar) from None
    return metas


def _describe(key: tuple[str | None, int | None, str | None]) -> str:
    run_id, world_size, schedule = key
    named = f"run {run_id[:8] if run_id else '(no id)'}"
    if world_size is None and schedule is None:
        return named  # a trace without a sidecar: its run id is all it says
    return f"{named} (world size {world_size}, schedule {schedule or '?'})"


def check_one_capture(
    metas: dict[Path, RankMeta],
    manifest: Manifest | None,
    root: Path,
    run_ids: dict[Path, str | None] | None = None,
) -> None:
    """TracekitError naming each run's files when the traces (or run.json) come from more than one capture.

    ``run_ids``: the run id each trace file carries itself (``TraceInfo.run_id``), which names a trace's
    run when it has no sidecar, and wins over its sidecar's when the two disagree.
    """
    runs: dict[tuple[str | None, int | None, str | None], list[str]] = {}
    for path in sorted(set(metas) | set(run_ids or {})):
        meta = metas.get(path)
        own = (run_ids or {}).get(path)
        if meta is None:
            key: tuple[str | None, int | None, str | None] = (own, None, None)
        else:
            key = (own or meta.run_id, meta.world_size, None if meta.schedule is None else meta.schedule.name)
        runs.setdefault(key, []).append(path.name)
    for key in [key for key in runs if key[1:] == (None, None)]:
        # A trace without a sidecar joins the run its own id names, when sidecars describe that run.
        described = next((other for other in runs if other[0] == key[0] and other[1:] != (None, None)), None)
        if described is not None:
            runs[described] = sorted(runs[described] + runs.pop(key))
    if manifest is not None and manifest.run_id is not None:
        schedule = None if manifest.schedule is None else manifest.schedule.name
        key = (manifest.run_id, manifest.world_size, schedule)
        if runs and not any(run_id == manifest.run_id for run_id, _, _ in runs):
            runs.setdefault(key, []).append("run.json")
    if len(runs) > 1:
        parts = "; ".join(f"{_describe(key)}: {', '.join(names)}" for key, names in runs.items())
        raise TracekitError(f"two runs mixed, refusing to analyse them together: {parts}", root)


def cut_points(metas: dict[Path, RankMeta], tables: dict[Path, Path]) -> dict[Path, Cut]:
    """Trace file -> where it stops counting, for traces whose sidecar names an unfinished step.

    ``tables`` maps each trace file to its cached event table (Parquet).
    """
    cuts: dict[Path, Cut] = {}
    for path, meta in metas.items():
        if meta.steps is None or meta.steps.unfinished is None:
            continue
        step = meta.steps.unfinished
        start = (
            pl.scan_parquet(tables[path])
            .filter((pl.col("cat") == "user_annotation") & (pl.col("name") == step_label(step)))
            .select(pl.col("start_ns").min())
            .collect()
            .item()
        )
        if start is not None:
            cuts[path] = Cut(meta.rank, step, int(start))
    return cuts


def cut_warning(cut: Cut, meta: RankMeta, root: Path) -> str:
    """The warning a cut trace carries into every report."""
    why = f"interrupted by {meta.interrupted_by}" if meta.interrupted_by else "it stopped inside it"
    return (
        f"{root}: rank {cut.rank}: step #{cut.step} did not finish ({why}); the trace is cut at its start "
        "and that step is not counted"
    )
