"""Why a straggler is slow: its causes, the share of its price each explains, and the numbers behind it.

Every flagged rank (``scoring``) and every flagged link (``links``) gets one or more causes, first
the one that explains most of its price; every other rank of the same replica gets ``waits``,
naming what it waits on. Definitions (``CAUSES``, quoted by every output):

- ``compute``: its own work is slower: on-CPU time beyond its reference (CPU runs, GC excluded), or
  GPU kernel time (GPU runs, where the clock is the kernels').
- ``contended``: ready but not running: run-queue wait beyond what the other ranks would have
  waited for the same dispatches or the same work (``own_clock``): one hog beside it, a busier core.
- ``blocked``: neither on a core nor waiting for one (wall - on-CPU - run-queue): sleep, I/O,
  locks, page faults. The run-queue wait is ``own_clock.waiting_ms``'s: an action whose thread made
  no voluntary context switch never slept, so all its time off a core is run-queue wait
  (``own_clock.NEVER_SLEPT``; in files without switch counts, one never put back on a core,
  ``own_clock.UNCOUNTED_WAIT``).
- ``gc``: Python garbage-collection pauses inside its actions.
- ``launch-bound`` (GPU runs): GPU idle inside its actions, before the next kernel's launch call had
  returned, beyond the other ranks' (per ms of their actions): its CPU launches slower than its GPU
  runs (``launch``).
- ``throttle`` (GPU runs with NVML samples): median SM clock below 95% of its peers'
  (``throttle``); power, temperature and NVML's reasons are its evidence.
- ``link``: the link's transfers expose more latency than the other links'.
- ``waits``: not slow itself; idle, waiting on the straggler (or slow link) named in ``upstream``.
- ``unmeasured``: the rank is slow on wall time, but its trace has no probes to split it.

Shares (CPU runs with probes): per step, the rank's wall time splits into GC pauses and, of the
rest, on-CPU, blocked and run-queue wait (GC pauses are wall time; the run-queue and blocked time
inside them are taken in the whole actions' proportions, so the four parts add up to the wall). Its reference's split is the median split of the other ranks (each
part per ms of their own time) scaled to the rank's reference time (``reference_ms`` of its judged
kinds, ``scoring``); its run-queue reference is the other ranks' wait per dispatch times its
actions' dispatches, or their wait per ms on a core in the same kinds times its on-CPU time,
whichever is larger (``shared_runq_ms``). Each part's excess over its reference, clipped at 0,
divided by their sum, is that cause's share; ``price_ms`` is share x the rank's saving. Causes
explaining less than ``MIN_SHARE`` are left out (one is always kept).

Shares (GPU runs): the rank's excess GPU time per step (own less reference) is, first, its launch
wait beyond the other ranks' launch wait per ms of their actions at its reference time
(``launch-bound``); then what its SM clock below its peers' adds to its reference busy time
(``throttle``, reference busy x (peer clock / own clock - 1)); ``compute`` takes the rest.
``absent_causes`` says, in one sentence each, which of the GPU causes a run could not compute.

``CAUSE_SCHEMA``, one row per (subject, cause), subjects most costly first, causes in order:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| subject | String | ``rank`` or ``link`` | never null |
| rank | Int32 | the rank (subject rank) | a link |
| link | String | ``A-B``, the link's ranks (subject link) | a rank |
| order | Int32 | 1 for the cause that explains most | never null |
| cause | String | one of ``CAUSES`` | never null |
| share | Float64 | share of the subject's price this cause explains, 0-1 | waits (it has no price) |
| price_ms | Float64 | share x the subject's saving_ms, ms of step time | waits |
| own_ms | Float64 | the subject's time in this cause per step, ms (link: latency per transfer) | not measured |
| reference_ms | Float64 | the same at its reference, ms | not measured or no reference |
| upstream | String | what a ``waits`` rank waits on (``rank 2``, ``link 1-2``) | any other cause |
| evidence | String | the numbers in one sentence | never null |

What it cannot see: work on threads other than the one that runs the action (a data loader, a
CUDA launch thread's wait), which kernel is slow inside a GPU action, on CPU runs whether
on-CPU time is slow because of a slower core, a busy host that slows the compute itself (a thread
preempted often) or more work (all are ``compute``), why a CPU
launched slowly (Python overhead, a busy core: ``launch-bound`` either way), GPU idle inside an
action whose next kernel was already launched (a stream waiting on an event: ``compute``), and a
clock that dropped between NVML samples.

Not for: flagging or pricing (``scoring``, ``links``), reading probes (``tracekit.trace.probes``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import polars as pl

from tracekit.stragglers.launch import rank_launch
from tracekit.stragglers.scoring import Stragglers
from tracekit.stragglers.throttle import clock_deficit

CAUSES: dict[str, str] = {
    "compute": "its own work is slower on its own clock (on-CPU time, GC excluded; GPU kernel time on GPU runs)",
    "contended": "ready but not running: run-queue wait beyond the other ranks' for the same dispatches or "
    "work (a hog beside it)",
    "blocked": "neither on a core nor waiting for one (wall - on-CPU - run queue): sleep, I/O, locks, page faults",
    "gc": "Python garbage-collection pauses inside its actions",
    "launch-bound": "GPU idle inside its actions waiting for its CPU to launch the next kernel, beyond the "
    "other ranks' (its CPU launching until the action's end)",
    "throttle": "GPU SM clock below 95% of its peers' (NVML samples; power and temperature as evidence)",
    "link": "its transfers expose more latency than the other links'",
    "waits": "not slow itself: idle, waiting on the straggler or slow link named in upstream",
    "unmeasured": "slow on wall time, but its trace has no probes to say why",
}
"""Each cause and its definition (docs/stragglers.md, "Why")."""

MIN_SHARE = 0.05
"""Causes explaining less of a price than this are left out (the first is always kept)."""

CAUSE_SCHEMA: dict[str, pl.DataType] = {
    "subject": pl.String(),
    "rank": pl.Int32(),
    "link": pl.String(),
    "order": pl.Int32(),
    "cause": pl.String(),
    "share": pl.Float64(),
    "price_ms": pl.Float64(),
    "own_ms": pl.Float64(),
    "reference_ms": pl.Float64(),
    "upstream": pl.String(),
    "evidence": pl.String(),
}


@dataclass(frozen=True)
class CauseInputs:
    """What the causes are read from; probes-derived frames are None when the run has none."""

    stragglers: Stragglers
    ops: pl.DataFrame
    """The replay case's ops (``tracekit.whatif.case.OPS_SCHEMA``)."""
    gpu_clock: bool
    """True when the actions are timed on the GPU (kernel time is the rank's own clock)."""
    clock: pl.DataFrame | None = None
    """``own_clock.CLOCK_SCHEMA``; None without probes."""
    contention: pl.DataFrame | None = None
    """``own_clock.RANK_CLOCK_SCHEMA``; None without probes."""
    links: pl.DataFrame | None = None
    """``links.LINK_SCHEMA``; None for op-tables."""
    nvml: pl.DataFrame | None = None
    """``tracekit.trace.probes.NVML_SCHEMA``; None or empty without GPU samples."""
    launch: pl.DataFrame | None = None
    """``launch.LAUNCH_SCHEMA``; None off a GPU clock."""


def _row(subject: str, rank: int | None, cause: str, evidence: str, **values: float | str | None) -> dict:
    return {"subject": subject, "rank": rank, "link": None, "order": 0, "cause": cause, "share": None,
            "price_ms": None, "own_ms": None, "reference_ms": None, "upstream": None, "evidence": evidence,
            **values}  # fmt: skip


def _reference_ms_per_step(scores: pl.DataFrame, rank: int, steps: int) -> tuple[float, float, set[str]]:
    """(own, reference) judged ms per step over the rank's kinds that have a reference, and those kinds."""
    judged = scores.filter((pl.col("rank") == rank) & pl.col("reference_ms").is_not_null())
    own = float((judged["median_ms"] * judged["actions"]).sum()) / steps
    reference = float((judged["reference_ms"] * judged["actions"]).sum()) / steps
    return own, reference, set(judged["kind"].to_list())


def _parts(clock: pl.DataFrame) -> pl.DataFrame:
    """Per rank, ms per step: gc, and the rest of the wall time split into on-CPU, blocked and run queue.

    GC pauses are wall time: the run-queue wait and blocked time inside them are taken to be in the
    same proportion as in the whole action, so the four parts add up to the wall time.
    """
    steps = clock.group_by("rank").agg(pl.col("step").n_unique().alias("steps"))
    summed = (
        clock.group_by("rank")
        .agg(*(pl.col(name).sum() for name in ("wall_ms", "cpu_ms", "runq_ms", "gc_ms", "shared_runq_ms")))
        .join(steps, on="rank")
        .with_columns(
            (pl.col("gc_ms") / pl.col("wall_ms").clip(lower_bound=1e-9)).clip(0.0, 1.0).alias("gc_share")
        )
    )
    rest = 1 - pl.col("gc_share")
    return summed.with_columns(
        (pl.col("runq_ms") * rest / pl.col("steps")).alias("runq_ms"),
        (pl.col("shared_runq_ms") * rest / pl.col("steps")).alias("shared_runq_ms"),
        (pl.col("cpu_ms") * rest / pl.col("steps")).alias("oncpu_ms"),
        ((pl.col("wall_ms") - pl.col("cpu_ms") - pl.col("runq_ms")).clip(lower_bound=0.0) * rest / pl.col("steps")).alias(
            "blocked_ms"
        ),
        (pl.col("gc_ms") / pl.col("steps")).alias("gc_ms"),
    ).with_columns((pl.col("gc_ms") + pl.col("oncpu_ms") + pl.col("blocked_ms")).alias("own_ms"))


_PART_OF = {"compute": "oncpu_ms", "gc": "gc_ms", "blocked": "blocked_ms"}


def _probed_causes(inputs: CauseInputs, rank: int, saving_ms: float) -> list[dict]:
    """The causes of a flagged rank with probes, largest share first (module docstring)."""
    assert inputs.clock is not None and inputs.contention is not None
    scores = inputs.stragglers.scores
    flagged = set(inputs.stragglers.flagged["rank"].to_list())
    judged_kinds = set(scores.filter((pl.col("rank") == rank) & pl.col("reference_ms").is_not_null())["kind"])
    clock = inputs.clock.filter((pl.col("rank") != rank) | pl.col("kind").is_in(sorted(judged_kinds)))
    parts = _parts(clock)
    mine = parts.filter(pl.col("rank") == rank).to_dicts()[0]
    _, reference, _ = _reference_ms_per_step(scores, rank, 1)
    reference /= max(1, int(mine["steps"]))
    others = parts.filter((pl.col("rank") != rank) & ~pl.col("rank").is_in(sorted(flagged)))
    if others.is_empty():
        others = parts.filter(pl.col("rank") != rank)
    contention = inputs.contention.filter(pl.col("rank") == rank).to_dicts()[0]
    expected = {}
    for cause, part in _PART_OF.items():
        shares = [row[part] / row["own_ms"] for row in others.to_dicts() if row["own_ms"] > 0]
        expected[cause] = (statistics.median(shares) if shares else 0.0) * reference
    expected["contended"] = mine["shared_runq_ms"]
    actual = {cause: mine[part] for cause, part in _PART_OF.items()} | {"contended": mine["runq_ms"]}
    excess = {cause: max(0.0, actual[cause] - expected[cause]) for cause in actual}
    total = sum(excess.values())
    if total <= 0:
        excess, total = {"compute": 1.0}, 1.0
    evidence = {
        "compute": lambda: f"{actual['compute']:.1f} ms per step on a core (GC excluded) against "
        f"{expected['compute']:.1f} ms at its reference's speed",
        "gc": lambda: f"{actual['gc']:.1f} ms per step in Python GC pauses against {expected['gc']:.1f} ms",
        "blocked": lambda: f"{actual['blocked']:.1f} ms per step neither on a core nor waiting for one "
        f"(sleep, I/O, locks) against {expected['blocked']:.1f} ms",
        "contended": lambda: f"{actual['contended']:.1f} ms per step waiting for a core: "
        f"{contention['latency_ms']:.2f} ms per dispatch against {contention['latency_reference_ms']:.2f} ms "
        f"on the other ranks (up to {contention['latency_allowance_ms']:.2f} ms counted as the host's)"
        + _uncounted_evidence(contention)
        + _per_core_ms_evidence(clock.filter(pl.col("rank") == rank)),
    }
    rows = [
        _row("rank", rank, cause, evidence[cause](), share=value / total, price_ms=value / total * saving_ms,
             own_ms=actual.get(cause), reference_ms=expected.get(cause))
        for cause, value in excess.items()
    ]
    return _keep(rows)


def _uncounted_evidence(contention: dict) -> str:
    """The contended evidence's part on waits schedstat did not count, where the rank had any."""
    rate, allowance = contention.get("uncounted_rate"), contention.get("uncounted_allowance")
    if not rate or allowance is None:
        return ""
    return (
        f"; uncounted, {rate:.2f} ms per ms on a core in actions that never slept (up to {allowance:.2f} "
        "counted as the host's)"
    )


def _per_core_ms_evidence(clock: pl.DataFrame) -> str:
    """The contended evidence's part on the wait per ms on a core, over a rank's ``clock`` rows
    (``own_clock.CLOCK_SCHEMA``), against its allowance from the other ranks' same kinds."""
    allowed = clock.filter(pl.col("wait_rate_allowance").is_not_null())
    on_core = float(allowed["cpu_ms"].sum())
    if on_core <= 0:
        return ""
    rate = float(allowed["runq_ms"].sum()) / on_core
    allowance = float((allowed["wait_rate_allowance"] * allowed["cpu_ms"]).sum()) / on_core
    return (
        f"; {rate:.2f} ms per ms on a core in its judged actions (up to {allowance:.2f} counted as the "
        "host's, from the same kinds on its peers)"
    )


def _keep(rows: list[dict]) -> list[dict]:
    rows = sorted(rows, key=lambda row: (-row["share"], row["cause"]))
    return [row for index, row in enumerate(rows) if index == 0 or row["share"] >= MIN_SHARE]


def _expected_share(figures: pl.DataFrame, part: str, ranks: set[int]) -> float:
    """The median, over ``ranks``, of ``part`` per ms of their actions' GPU span (0 when none has any)."""
    shares = [row[part] / row["wall_ms"] for row in figures.to_dicts() if row["rank"] in ranks and row["wall_ms"] > 0]
    return statistics.median(shares) if shares else 0.0


@dataclass(frozen=True)
class _GpuBusy:
    """A GPU rank's launch-bound share of its excess, and the busy time the rest is judged on."""

    launch_ms: float
    """Launch wait per step beyond the other ranks' rate at its reference time (at most the excess)."""
    own_ms: float
    reference_ms: float
    evidence: str
    """What ``compute`` quotes: GPU busy time against its reference."""
    row: dict | None
    """The ``launch-bound`` cause, when there is a launch share."""


def _launch_share(
    inputs: CauseInputs, rank: int, kinds: set[str], own: float, reference: float, saving_ms: float
) -> _GpuBusy:
    """``_GpuBusy`` from the launch-wait figures (``tracekit.stragglers.launch``); the whole GPU
    time as busy when the run has none for ``rank``."""
    plain = _GpuBusy(0.0, own, reference, f"{own:.1f} ms of GPU time per step against {reference:.1f} ms", None)
    if inputs.launch is None or inputs.launch.is_empty():
        return plain
    figures = rank_launch(
        inputs.launch.filter((pl.col("rank") != rank) | pl.col("kind").is_in(sorted(kinds)))
    ).with_columns(*(pl.col(name) / pl.col("steps") for name in ("wall_ms", "busy_ms", "launch_wait_ms",
                                                               "launching_ms")))  # fmt: skip
    mine = figures.filter(pl.col("rank") == rank).to_dicts()
    if not mine:
        return plain
    flagged = set(inputs.stragglers.flagged["rank"].to_list())
    peers = set(figures["rank"].to_list()) - {rank}
    peers = (peers - flagged) or peers
    row, excess = mine[0], max(own - reference, 1e-9)
    expected_wait = _expected_share(figures, "launch_wait_ms", peers) * reference
    busy_reference = _expected_share(figures, "busy_ms", peers) * reference
    launch = min(excess, max(0.0, row["launch_wait_ms"] - expected_wait))
    launching = row["launching_ms"] / row["wall_ms"] if row["wall_ms"] > 0 else 0.0
    cause = (
        _row("rank", rank, "launch-bound",
             f"{row['launch_wait_ms']:.1f} ms per step of GPU idle inside its actions waiting "
             f"for its CPU to launch the next kernel, against {expected_wait:.1f} ms at the other "
             f"ranks' rate; its CPU was still launching for {launching:.0%} of its actions' GPU time "
             f"(GPU busy {row['busy_ms']:.1f} of {row['wall_ms']:.1f} ms)",
             share=launch / excess, price_ms=launch / excess * saving_ms,
             own_ms=row["launch_wait_ms"], reference_ms=expected_wait)
        if launch > 0 else None
    )  # fmt: skip
    evidence = (
        f"{row['busy_ms']:.1f} ms of GPU busy time per step (kernels, copies) against "
        f"{busy_reference:.1f} ms at its reference"
    )
    return _GpuBusy(launch, row["busy_ms"], busy_reference, evidence, cause)


def _gpu_causes(inputs: CauseInputs, rank: int, saving_ms: float) -> list[dict]:
    """A flagged rank on a GPU clock: launch-bound, throttle, and compute for the rest of its excess.

    Its excess (own GPU time per step over its reference) is first what its launch wait (GPU idle
    inside its actions before the next kernel's launch returned) exceeds the other ranks' launch
    wait per ms at its reference time; then what its lower SM clock would add to the kernels'
    reference busy time (``throttle``); ``compute`` is the rest.
    """
    steps = max(1, inputs.ops.filter(pl.col("rank") == rank)["step"].n_unique())
    own, reference, kinds = _reference_ms_per_step(inputs.stragglers.scores, rank, steps)
    excess = max(own - reference, 1e-9)
    busy = _launch_share(inputs, rank, kinds, own, reference, saving_ms)
    rows = [busy.row] if busy.row is not None else []
    throttle = 0.0
    deficit = None if inputs.nvml is None or inputs.nvml.is_empty() else clock_deficit(inputs.nvml, rank)
    if deficit is not None:
        throttle = min(excess - busy.launch_ms, busy.reference_ms * deficit.slowdown)
        if throttle > 0:
            rows.append(_row("rank", rank, "throttle", deficit.evidence(), share=throttle / excess,
                             price_ms=throttle / excess * saving_ms))  # fmt: skip
    rest = max(0.0, excess - busy.launch_ms - throttle)
    rows.append(
        _row("rank", rank, "compute", busy.evidence, share=rest / excess, price_ms=rest / excess * saving_ms,
             own_ms=busy.own_ms, reference_ms=busy.reference_ms)
    )  # fmt: skip
    return _keep(rows)


def _unmeasured(inputs: CauseInputs, rank: int, saving_ms: float) -> list[dict]:
    steps = max(1, inputs.ops.filter(pl.col("rank") == rank)["step"].n_unique())
    own, reference, _ = _reference_ms_per_step(inputs.stragglers.scores, rank, steps)
    return [
        _row("rank", rank, "unmeasured", f"{own:.1f} ms of wall time per step against {reference:.1f} ms; no "
             "probes beside its trace to tell compute from contended or blocked",
             share=1.0, price_ms=saving_ms, own_ms=own, reference_ms=reference)
    ]


def _busy_ms(ops: pl.DataFrame) -> dict[int, float]:
    """Per rank: its compute ms per step (mean over steps)."""
    busy = ops.filter(pl.col("compute")).group_by("rank", "step").agg(pl.col("duration_ms").sum().alias("busy"))
    return dict(busy.group_by("rank").agg(pl.col("busy").mean()).iter_rows())


def _waits(inputs: CauseInputs, upstream: dict[int, tuple[str, float]], step_ms: float) -> list[dict]:
    """``waits`` for every judged, unflagged rank of a replica holding a straggler or slow link."""
    flagged = set(inputs.stragglers.flagged["rank"].to_list())
    busy = _busy_ms(inputs.ops)
    replica_of = dict(inputs.ops.select("rank", "dp_rank").unique().iter_rows())
    rows = []
    for rank in sorted(inputs.stragglers.ranks["rank"].to_list()):
        if rank in flagged or replica_of.get(rank) not in upstream:
            continue
        name, price = upstream[replica_of[rank]]
        idle = max(0.0, step_ms - busy.get(rank, 0.0))
        rows.append(
            _row("rank", rank, "waits", f"not slow itself: {idle:.1f} ms of its {step_ms:.1f} ms step is not its "
                 f"compute, waiting on {name} (which costs {price:.1f} ms per step)",
                 own_ms=idle, upstream=name)
        )
    return rows


OPTABLE_ABSENT_CAUSES = (
    "launch-bound, throttle: not computed: an op-table holds op durations, no kernels or GPU samples",
)
"""``absent_causes`` of an op-table, which has no ``CauseInputs`` beyond its ops."""


def absent_causes(inputs: CauseInputs) -> tuple[str, ...]:
    """One sentence per GPU cause the run could not compute, and why (an op-table: ``OPTABLE_ABSENT_CAUSES``)."""
    if not inputs.gpu_clock:
        return (
            "launch-bound: not computed: no GPU kernels timed inside the actions (a CPU-timed run)",
            "throttle: not computed: no GPU kernels timed inside the actions (a CPU-timed run), no GPU clock to sample",
        )
    notes = []
    if inputs.launch is None or inputs.launch.is_empty():
        notes.append("launch-bound: not computed: no kernel is linked to a CPU launch inside an action")
    if inputs.nvml is None or inputs.nvml.is_empty():
        notes.append(
            "throttle: not measured: no NVML samples beside the traces (no probes files, or no GPU or "
            "nvidia-ml-py where they were captured: the probes notes say which)"
        )
    return tuple(notes)


def causes(inputs: CauseInputs) -> pl.DataFrame:
    """``CAUSE_SCHEMA``: every straggler's and slow link's causes, and ``waits`` for the ranks behind them."""
    result = inputs.stragglers
    probed = set() if inputs.clock is None else set(inputs.clock["rank"].to_list())
    rows: list[dict] = []
    subjects: list[tuple[float, list[dict]]] = []
    upstream: dict[int, tuple[str, float]] = {}
    replica_of = dict(inputs.ops.select("rank", "dp_rank").unique().iter_rows())
    step_ms = float(result.ranks["step_ms"][0]) if result.ranks.height else 0.0
    for row in result.flagged.to_dicts():
        rank, saving = row["rank"], row["saving_ms"]
        if inputs.gpu_clock:
            found = _gpu_causes(inputs, rank, saving)
        elif rank in probed:
            found = _probed_causes(inputs, rank, saving)
        else:
            found = _unmeasured(inputs, rank, saving)
        subjects.append((saving, found))
        replica = replica_of.get(rank)
        if replica not in upstream or upstream[replica][1] < saving:
            upstream[replica] = (f"rank {rank}", saving)
    if inputs.links is not None:
        for link in inputs.links.filter(pl.col("flagged")).to_dicts():
            name = f"{link['rank_a']}-{link['rank_b']}"
            found = [
                _row("link", None, "link", f"{link['latency_ms']:.1f} ms exposed per transfer against "
                     f"{link['reference_ms']:.1f} ms on the other links, over {link['transfers']} transfers",
                     link=name, share=1.0, price_ms=link["saving_ms"], own_ms=link["latency_ms"],
                     reference_ms=link["reference_ms"])
            ]
            subjects.append((link["saving_ms"], found))
            replica = replica_of.get(link["rank_a"])
            if replica not in upstream or upstream[replica][1] < link["saving_ms"]:
                upstream[replica] = (f"link {name}", link["saving_ms"])
    for _, found in sorted(subjects, key=lambda item: -item[0]):
        rows += [{**row, "order": order} for order, row in enumerate(found, start=1)]
    rows += [{**row, "order": 1} for row in _waits(inputs, upstream, step_ms)]
    return pl.DataFrame(rows, schema=CAUSE_SCHEMA, orient="row") if rows else pl.DataFrame(schema=CAUSE_SCHEMA)

