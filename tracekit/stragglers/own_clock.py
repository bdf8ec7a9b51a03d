"""Each rank's compute on its own clock: wall time less the run-queue wait every rank shares.

Wall-clock durations cannot tell a rank that computes slowly from one whose process waited for a
core. The collector's probes (``tracekit.trace.probes``) split each action's wall time into
on-CPU, blocked (neither on a core nor waiting for one) and run-queue wait. On a CPU clock,
straggler scoring judges each action on its own clock:

- ``latency_ms``: a rank's run-queue wait per dispatch (each time its thread was put on a core) over
  the whole capture window, labelled or not: how long the host makes it wait for a core;
  ``latency_reference_ms``: the median of the other ranks' (the wait the host gives every rank);
- ``latency_allowance_ms``: the wait per dispatch counted as the host's, ``WAIT_TOLERANCE`` times
  the upper quartile of the other ranks' (``UPPER_QUARTILE``);
- ``uncounted_rate``: the wait schedstat did not count, in the actions whose thread never slept
  (``NEVER_SLEPT``: no voluntary context switch; in files without switch counts, no dispatch
  counted, ``UNCOUNTED_WAIT``), per ms those actions spent on a core: with no dispatch to judge it
  by, it is judged by the work it waited beside (a fair scheduler makes every thread wait about
  alike per ms it runs); ``uncounted_allowance``: the same tolerance times the other ranks' upper
  quartile;
- ``wait_rate``: a rank's wait for a core, counted or not, per ms on a core in the actions of one
  kind, and ``wait_rate_allowance``: ``RATE_TOLERANCE`` times the other ranks' upper quartile of
  theirs in the same kind (``PER_MS_ON_A_CORE``) or in their busiest kind (``BUSIEST_KIND``),
  whichever is larger: the same work waits about alike per ms it runs on a fairly shared host,
  however its dispatches fall;
- the wait counted as the host's (``shared_runq_ms``): over all of a rank's actions of a kind
  (``ALL_ACTIONS_OF_A_KIND``), ``min(counted wait, max(latency_allowance_ms * dispatches,
  wait_rate_allowance * on-CPU ms)) + min(uncounted wait, uncounted_allowance * never-slept
  on-CPU ms)``, spread over its actions in proportion to their own waits. The tolerance: the
  scheduler makes a thread that uses up its slice wait longer per dispatch than one that sleeps,
  so a rank computing more than its peers waits somewhat longer on the same host;
- each compute op's judged duration: its realized duration less its action's share of the host's
  wait, never below the action's on-CPU time (``READY_IN_COMPUTE``; ``on_own_clock``). So a busy
  host that slows every rank alike (uniform load) flags nobody, however often an action sleeps and
  wakes; a rank that waits longer than most of its peers (a hog pinned beside it alone) keeps the
  excess, so it is still flagged, and its cause is ``contended`` (``tracekit.stragglers.causes``).

GPU clocks are already the rank's own (kernel time), so nothing here applies to them.

``CLOCK_SCHEMA``, one row per (rank, step, stage, kind) with probes:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank, step, stage | Int32 | as in the realized actions | never null |
| kind | String | F, B, I, W or F&B | never null |
| actions | Int64 | actions with probes | never null |
| wall_ms, cpu_ms, runq_ms, gc_ms | Float64 | sums over those actions, ms (runq_ms: ``waiting_ms`` plus ``uncounted_ms``) | never null (runq_ms 0 where unknown) |
| dispatches | Int64 | times the thread was put on a core during them | never null (0 where unknown) |
| counted_ms | Float64 | the ``waiting_ms`` sum: the run-queue wait schedstat counted | never null (0 where unknown) |
| wait_rate_allowance | Float64 | ``RATE_TOLERANCE`` x the other ranks' upper quartile of wait for a core per ms on one, in this kind or in their busiest kind, whichever is larger (``kind_wait_rates``) | no other rank has run-queue wait known |
| shared_runq_ms | Float64 | the sum of its actions' shares of the wait counted as the host's: the wait every rank would have had | never null |

``OP_CLOCK_SCHEMA``, one row per replay op with probes: op (UInt32, its row in the replay case's
ops), cpu_ms and shared_runq_ms (Float64, its action's on-CPU time and share of the host's wait).

``RANK_CLOCK_SCHEMA``, one row per rank with probes: rank (Int32), runq_ms (Float64) and dispatches
(Int64) over the window, latency_ms (runq_ms / dispatches), latency_reference_ms (the other ranks'
median; the rank's own where no other rank has one), latency_allowance_ms (Float64, ``WAIT_TOLERANCE``
times the other ranks' upper quartile; the rank's own times it where no other rank has one),
runq_known (Boolean), uncounted_rate (Float64: its actions' ``uncounted_ms`` per ms on a core in
the actions whose thread never slept; null without probes or such actions) and uncounted_allowance
(Float64: the same allowance, of the other ranks' uncounted_rate).

Not for: scoring itself (``scoring``) or naming causes (``causes``).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import numpy as np

CLOCK_KEY = ["rank", "step", "stage", "kind"]

CLOCK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "actions": pl.Int64(),
    "wall_ms": pl.Float64(),
    "cpu_ms": pl.Float64(),
    "runq_ms": pl.Float64(),
    "gc_ms": pl.Float64(),
    "dispatches": pl.Int64(),
    "counted_ms": pl.Float64(),
    "wait_rate_allowance": pl.Float64(),
    "shared_runq_ms": pl.Float64(),
}

OP_CLOCK_SCHEMA: dict[str, pl.DataType] = {
    "op": pl.UInt32(),
    "cpu_ms": pl.Float64(),
    "shared_runq_ms": pl.Float64(),
}

RANK_CLOCK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "runq_ms": pl.Float64(),
    "dispatches": pl.Int64(),
    "latency_ms": pl.Float64(),
    "latency_reference_ms": pl.Float64(),
    "latency_allowance_ms": pl.Float64(),
    "runq_known": pl.Boolean(),
    "uncounted_rate": pl.Float64(),
    "uncounted_allowance": pl.Float64(),
}

WAIT_TOLERANCE = 1.25
"""Wait per dispatch up to this multiple of the other ranks' counts as the host's (measured here: a
rank spinning beside sleeping peers waited 1.1x their wait per dispatch; one beside a pinned busy
process 1.4x to 2.2x)."""

RATE_TOLERANCE = 2.0
"""Wait per ms on a core, kind by kind, up to this multiple of the other ranks' upper quartile
counts as the host's. Measured on this 2-core VM: in 72 clean 4-rank captures at load 8.5 to 12
(six busy processes unpinned), the two ranks that 1.25x flagged waited 1.59x and 1.74x (a
DualPipeV F&B, a DualPipeV W); beside a busy process pinned to its core (six captures, one per
schedule), the hogged rank waited 4.2x to 66x in every kind it ran. Chosen on those captures and
then checked on 24 new clean ones (docs/performance.md, "False alarms with both cores busy")."""

UPPER_QUARTILE = (
    "on a uniformly busy host the ranks' waits per dispatch spread: at load 10 to 12 on this 2-core VM "
    "(six busy processes, 4-rank DualPipeV), 1.85 to 3.49 ms in one capture, the third highest 1.46x "
    "the median of the rest; a rank is contended only beyond the upper quartile of the other ranks', "
    "which a busy process pinned beside one rank (2.3 to 11 times their median) still exceeds, and "
    "which a few hogged ranks among many do not raise for one another"
)
"""Why the allowance is set by the other ranks' upper quartile, not their median or their highest."""

NEVER_SLEPT = (
    "an action whose thread made no voluntary context switch never slept, so all its time off a core was "
    "a wait for one, whatever schedstat counted: only a preemption (an involuntary switch) took it off"
)
"""Why, where the collector counted context switches, such an action's wall - on-CPU - run-queue
time counts as run-queue wait, not as blocked.

Measured on this 2-core VM (kernel 6.18), a clean 4-rank DualPipeV capture beside six busy
processes (load about 10), probes read in the collector's first order: 71 actions lost more than
1 ms off a core with no dispatch counted by schedstat (94 to 137 ms a rank); every one of them had
one or two involuntary switches and no voluntary one. That time was a wait set off by the probe's
own read of the CPU clock after schedstat had been read (``collectors.probes.READ_ORDER``); read in
the current order, 1.3 to 3.0 ms a rank are left in the actions that did not sleep, which this
rule still counts as waits.
"""

UNCOUNTED_WAIT = (
    "an action whose thread was never put back on a core (0 dispatches) did not sleep: a sleep ends "
    "in a wake-up and a dispatch, so its time off a core is a wait for one that schedstat did not count"
)
"""Why, in files written before the collector counted context switches, an action with no dispatch
counts its wall - on-CPU - run-queue time as run-queue wait, not as blocked (``NEVER_SLEPT``
replaces it where the switches are known).

Measured on this 2-core VM (kernel 6.18): with a busy process at nice -10 pinned beside rank 1 of
a 4-rank 1F1B job, rank 1's forwards that schedstat counted no dispatch for took 30-45 ms of wall
for 3 ms of CPU, about the nice-0 share of a core beside a nice -10 process (1024 / 10572): the
busy process ran in between, uncounted; at load 2 to 10 without a hog, 1% to 34% of a capture's
undispatched actions lost more than 2 ms the same way. With six busy processes unpinned (load 10
to 12, 24 clean captures), most actions went undispatched and lost 0.01 to 6.2 ms per ms on a core
(every rank alike, so judged against the other ranks' upper quartile: ``uncounted_allowance``);
beside a pinned busy process (six captures, one per schedule), the hogged rank lost 10.7 to 14.4
ms per ms on a core against allowances of 0.7 to 2.4 from its peers. A spinning thread beside busy
processes, alone, has every wait counted: the job's were set off by the probe's own reads, in the
collector's first order (``collectors.probes.READ_ORDER``)."""

PER_MS_ON_A_CORE = (
    "a thread that uses up its slice is put back in the run queue and waits there for every other ready "
    "thread's slice, while one that wakes from a sleep is run soon: per dispatch, actions that compute "
    "wait longer than the capture window's average, and most on the ranks that compute most; per ms on a "
    "core, the same work waits about alike on every rank of a fairly shared host"
)
"""Why a kind's wait for a core, counted or not, is also judged per ms on a core against the other
ranks' same kind.

Measured on this 2-core VM at load 10 to 12 (six busy processes, a clean 4-rank DualPipeV
capture): the F&B actions, 1.1 to 1.4 ms on a core each, waited 4.7 to 6.5 ms per dispatch on
every rank against window averages of 1.85 to 3.49; per ms on a core, 3.1 to 5.1 ms on the four
ranks (the highest 1.6x the others' upper quartile). Judged per dispatch alone, one rank's F&B
kept 3x its peers' time and was flagged; judged per ms on a core too, none is. Beside a busy
process pinned to its core (six captures, one per schedule), the hogged rank waited 4.2x to 66x
its peers' upper quartile per ms on a core in every kind it ran (ZB-V rank 3: 9.7 ms per ms on a
core in its judged kinds, against 4.1 allowed at ``RATE_TOLERANCE``): still far beyond."""


BUSIEST_KIND = (
    "per ms on a core a thread waits the more the longer it runs between sleeps, and the same kind runs "
    "in long bursts on one rank and in short ones after a sleep on another (1F1B's last stage runs each "
    "forward straight into its backward; the other stages' backwards follow a wait for the gradient): so "
    "a kind is also allowed what the other ranks waited in their busiest kind, the one that waited most "
    "per ms on a core"
)
"""Why the allowance per ms on a core is also taken from the other ranks' busiest kind.

Measured on this 2-core VM beside two busy processes and other work (load about 11, a clean 4-rank
1F1B capture): the last stage's backwards waited 13.1 ms per ms on a core, the other stages'
0.02 to 1.1 (short bursts after a sleep), their forwards 3.3 to 9.9 (the warm-up's back to back);
judged against the same kind alone the last stage was flagged (6% of the step). Beside a busy
process pinned to its core, the hogged rank still waits 3.9x to 11.6x its allowance basis in every
kind it runs (six captures, one per schedule)."""


ALL_ACTIONS_OF_A_KIND = (
    "whether a rank waited beyond the host's allowance is judged over all its actions of a kind, and "
    "what is counted as the host's is spread over them in proportion to their wait: on a uniformly busy "
    "host the wait varies from action to action, and judged one (step, stage) at a time every rank would "
    "keep the excess of its unlucky actions"
)
"""Why the allowances apply to a rank's whole kind, not to each (step, stage) of it.

Measured on this 2-core VM at load 10 to 12 (a clean 4-rank DualPipeV capture): one rank's F&B
waited 3.6 to 6.6 ms per ms on a core from one (step, stage) to another, 5.1 over the kind against
an allowance of 4.8 from the other ranks; judged one (step, stage) at a time (counted waits alone),
it kept 8.5 ms of its wait and was flagged."""


READY_IN_COMPUTE = (
    "a thread waits for a core only while it is ready to run: inside its compute, or as it wakes; while "
    "it waits on a transfer it sleeps, off the run queue. So the wait counted as the host's is taken out "
    "of an action's compute ops first, never below their time on a core"
)
"""Why the host's wait comes out of each compute op before the rest of its action.

Measured on this 2-core VM at load 10 to 12 (clean 4-rank captures): in one DualPipeV capture one
rank's F&B compute ops took 92.7 ms for 18.7 ms on a core and held 74 of its 81 ms of counted
wait; its peers' held 14 to 40 ms of their 37 to 57, the rest falling in their transfers'
wake-ups. Scaled in proportion to the whole action instead, the first kept twice its peers' time
per op and was flagged. In an interleaved 1F1B capture the ops of one (step, stage) ranged from
0.18 to 14 ms for about 1 ms on a core each: one factor for them all left a rank's median B at 2.5x
its peers' (flagged); op by op, at 1.35x (not flagged)."""


JUDGED_CLOCK = (
    "own clock: each compute op less its wait for a core that the other ranks had too, never below its time "
    f"on a core (up to {WAIT_TOLERANCE}x the upper quartile of their wait per dispatch over the window, or "
    f"{RATE_TOLERANCE}x that of their wait per ms on a core in the same kind of action or their busiest "
    "kind, whichever allows more)"
)
"""The one sentence every output quotes for the clock compute is judged on when probes exist."""


def _beside_the_others(
    values: list[float | None], own_when_alone: bool = True, tolerance: float = WAIT_TOLERANCE
) -> tuple[list[float | None], list[float | None]]:
    """Per rank: (the other ranks' median, ``tolerance`` times their upper quartile) of ``values``;
    where no other rank has one, the rank's own value (times the tolerance), or None when not
    ``own_when_alone``."""
    references: list[float | None] = []
    allowances: list[float | None] = []
    for index, value in enumerate(values):
        others = sorted(other for j, other in enumerate(values) if j != index and other is not None)
        if value is None or not others:
            references.append(value if own_when_alone else None)
            allowances.append(None if value is None or not own_when_alone else tolerance * value)
            continue
        references.append(statistics.median(others))
        upper = statistics.quantiles(others, n=4, method="inclusive")[2] if len(others) > 1 else others[0]
        allowances.append(tolerance * upper)
    return references, allowances


def rank_contention(window: pl.DataFrame, probes: pl.DataFrame | None = None) -> pl.DataFrame:
    """``RANK_CLOCK_SCHEMA``: each rank's run-queue wait per dispatch against the other ranks', and,
    with its ``probes``, its uncounted wait per ms on a core against theirs."""
    if window.is_empty():
        return pl.DataFrame(schema=RANK_CLOCK_SCHEMA)
    rows = window.sort("rank").with_columns(
        (pl.col("runq_ms") / pl.col("dispatches").clip(lower_bound=1)).alias("latency_ms"),
        (pl.col("runq_ms").is_not_null() & pl.col("dispatches").is_not_null()).alias("runq_known"),
    )
    if probes is None:
        rows = rows.with_columns(pl.lit(None, pl.Float64()).alias("uncounted_rate"))
    else:
        lost, on_core = uncounted_ms(probes).sum(), pl.col("cpu_ms").filter(_never_slept()).sum()
        rates = probes.group_by("rank").agg(  # a rank that lost none this way: 0, whatever it ran
            pl.when(lost == 0).then(0.0).when(on_core > 0).then(lost / on_core).alias("uncounted_rate")
        )
        rows = rows.join(rates, on="rank", how="left")
    known = rows["runq_known"].to_list()
    latencies = [latency if ok else None for latency, ok in zip(rows["latency_ms"].to_list(), known)]
    references, allowances = _beside_the_others(latencies)
    _, uncounted_allowances = _beside_the_others(rows["uncounted_rate"].to_list())
    return rows.with_columns(
        pl.Series("latency_reference_ms", references, dtype=pl.Float64()),
        pl.Series("latency_allowance_ms", allowances, dtype=pl.Float64()),
        pl.Series("uncounted_allowance", uncounted_allowances, dtype=pl.Float64()),
    ).select(list(RANK_CLOCK_SCHEMA))


def waiting_ms(probes: pl.DataFrame) -> pl.Expr:
    """Per action: its thread's run-queue wait, plus the other Python threads' while it was blocked.

    A thread that holds the GIL while it waits for a core blocks the action's thread: up to the
    action's blocked time (wall - on-CPU - own wait), the other Python threads' run-queue wait is
    the host's too.
    """
    runq = pl.col("runq_ms").fill_null(0.0)
    blocked = (pl.col("wall_ms") - pl.col("cpu_ms") - runq).clip(lower_bound=0.0)
    return runq + pl.min_horizontal(blocked, pl.col("peer_runq_ms").fill_null(0.0))


def _never_slept() -> pl.Expr:
    """Actions with run-queue wait known whose thread never slept: no voluntary context switch
    (``NEVER_SLEPT``), or, where switches were not counted, no dispatch (``UNCOUNTED_WAIT``)."""
    voluntary = pl.col("voluntary")
    slept = pl.when(voluntary.is_not_null()).then(voluntary > 0).otherwise(pl.col("dispatches") > 0)
    return pl.col("runq_ms").is_not_null() & slept.not_()


def uncounted_ms(probes: pl.DataFrame) -> pl.Expr:
    """Per action: where its thread never slept (``_never_slept``), the rest of its time off a core
    beyond ``waiting_ms``; 0 otherwise."""
    rest = (pl.col("wall_ms") - pl.col("cpu_ms") - waiting_ms(probes)).clip(lower_bound=0.0)
    return pl.when(_never_slept()).then(rest).otherwise(0.0)


def kind_wait_rates(probes: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, kind) with run-queue wait known: ``wait_rate``, its wait for a core, counted or not
    (``waiting_ms`` + ``uncounted_ms``), per ms on a core, and ``wait_rate_allowance``,
    ``RATE_TOLERANCE`` times the other ranks' upper quartile of theirs in the same kind
    (``PER_MS_ON_A_CORE``) or of theirs in their busiest kind (``BUSIEST_KIND``), whichever is
    larger; null where no other rank has either."""
    rates = (
        probes.filter(pl.col("runq_ms").is_not_null())
        .with_columns((waiting_ms(probes) + uncounted_ms(probes)).alias("wait_ms"))
        .group_by("kind", "rank")
        .agg(
            pl.when(pl.col("cpu_ms").sum() > 0)
            .then(pl.col("wait_ms").sum() / pl.col("cpu_ms").sum())
            .alias("wait_rate")
        )
        .sort("kind", "rank")
    )
    allowances: list[float | None] = []
    for kind_rates in rates.partition_by("kind", maintain_order=True):
        rates_of_kind = kind_rates["wait_rate"].to_list()
        allowances.extend(_beside_the_others(rates_of_kind, own_when_alone=False, tolerance=RATE_TOLERANCE)[1])
    busiest = rates.group_by("rank").agg(pl.col("wait_rate").max()).sort("rank")
    _, busiest_allowances = _beside_the_others(
        busiest["wait_rate"].to_list(), own_when_alone=False, tolerance=RATE_TOLERANCE
    )
    return (
        rates.with_columns(pl.Series("same_kind", allowances, dtype=pl.Float64()))
        .join(
            busiest.select("rank", pl.Series("busiest_kind", busiest_allowances, dtype=pl.Float64())),
            on="rank",
            how="left",
        )
        .with_columns(pl.max_horizontal("same_kind", "busiest_kind").alias("wait_rate_allowance"))
        .select("kind", "rank", "wait_rate", "wait_rate_allowance")
        .sort("kind", "rank")
    )


_KIND_OF_RANK = ["rank", "kind"]
_ACTION_KEY = ["rank", "step", "stage", "kind", "microbatch"]


def _in_proportion(wait: str, allowance: pl.Expr) -> pl.Expr:
    """Per action: its share of ``min(the rank's wait in the kind, allowance)``, in proportion to its
    own ``wait`` (``ALL_ACTIONS_OF_A_KIND``)."""
    total = pl.col(wait).sum().over(_KIND_OF_RANK)
    return pl.when(total > 0).then(pl.col(wait) * pl.min_horizontal(total, allowance) / total).otherwise(0.0)


def judged_actions(probes: pl.DataFrame, contention: pl.DataFrame) -> pl.DataFrame:
    """``probes`` (``PROBE_SCHEMA``), each action with its waits and its share of the host's:
    counted_ms (``waiting_ms``), uncounted_ms, never_slept_cpu_ms and known_cpu_ms (its on-CPU time
    where its thread never slept / where its run-queue wait is known), dispatches (0 where
    unknown), wait_rate_allowance (``kind_wait_rates``) and shared_runq_ms: what of its wait is
    counted as the host's, given the rank's allowances in ``contention`` (``RANK_CLOCK_SCHEMA``)."""
    allowances = contention.select(
        "rank", pl.col("latency_allowance_ms").fill_null(0.0), pl.col("uncounted_allowance").fill_null(0.0)
    )
    return (
        probes.with_columns(
            waiting_ms(probes).alias("counted_ms"),
            uncounted_ms(probes).alias("uncounted_ms"),
            pl.when(_never_slept()).then(pl.col("cpu_ms")).otherwise(0.0).alias("never_slept_cpu_ms"),
            pl.when(pl.col("runq_ms").is_not_null()).then("cpu_ms").otherwise(0.0).alias("known_cpu_ms"),
            pl.col("dispatches").fill_null(0),
        )
        .join(allowances, on="rank", how="left", maintain_order="left")
        .join(kind_wait_rates(probes).drop("wait_rate"), on=_KIND_OF_RANK, how="left", maintain_order="left")
        .with_columns((pl.col("counted_ms") + pl.col("uncounted_ms")).alias("wait_ms"))
        .with_columns(_in_proportion("wait_ms", _host_allowance()).alias("shared_runq_ms"))
        .drop("wait_ms")
    )


def _host_allowance() -> pl.Expr:
    """Per action, over its rank's actions of its kind: the wait for a core counted as the host's,
    whichever of two judgements allows more (``PER_MS_ON_A_CORE``): per dispatch for the counted
    wait and per ms on a core for the uncounted (against the rank's allowances over the window), or
    all of it per ms on a core (``wait_rate_allowance``: the other ranks' same or busiest kind)."""

    def kind_sum(name: str) -> pl.Expr:
        return pl.col(name).sum().over(_KIND_OF_RANK)

    counted = pl.min_horizontal(
        kind_sum("counted_ms"), pl.col("latency_allowance_ms") * kind_sum("dispatches")
    )
    uncounted = pl.min_horizontal(
        kind_sum("uncounted_ms"), pl.col("uncounted_allowance") * kind_sum("never_slept_cpu_ms")
    )
    by_dispatch = counted + uncounted
    by_work = pl.col("wait_rate_allowance").fill_null(0.0) * kind_sum("known_cpu_ms")
    return pl.max_horizontal(by_dispatch, by_work)


def clock_factors(probes: pl.DataFrame, window: pl.DataFrame) -> pl.DataFrame:
    """``CLOCK_SCHEMA`` of ``probes`` and their capture ``window``: ``clock_sums`` of their
    ``judged_actions`` against ``rank_contention``."""
    return clock_sums(judged_actions(probes, rank_contention(window, probes)))


def clock_sums(judged: pl.DataFrame) -> pl.DataFrame:
    """``CLOCK_SCHEMA``: per (rank, step, stage, kind), the sums of ``judged`` (``judged_actions``)."""
    return (
        judged.group_by(CLOCK_KEY)
        .agg(
            pl.len().cast(pl.Int64()).alias("actions"),
            *(pl.col(name).sum() for name in ("wall_ms", "cpu_ms", "counted_ms", "uncounted_ms", "gc_ms")),
            pl.col("dispatches").sum().cast(pl.Int64()),
            pl.col("wait_rate_allowance").first(),
            pl.col("shared_runq_ms").sum(),
        )
        .with_columns((pl.col("counted_ms") + pl.col("uncounted_ms")).alias("runq_ms"))
        .select(list(CLOCK_SCHEMA))
        .sort(CLOCK_KEY)
    )


def op_clock(judged: pl.DataFrame, actions: pl.DataFrame, node_of_action: np.ndarray) -> pl.DataFrame:
    """``OP_CLOCK_SCHEMA``: each replay op's on-CPU time and host's wait, from the ``judged_actions``
    of the realized ``actions`` it spans (``node_of_action``: each actions row's op row; an overlapped
    pair's two halves one op, whose probe is its forward half's, kind F&B)."""
    keys = (
        actions.select("rank", "step", "stage", "kind", "microbatch")
        .with_columns(pl.Series("op", node_of_action).cast(pl.UInt32()))
        .sort("op", pl.col("kind") != "F", maintain_order=True)
        .group_by("op", maintain_order=True)
        .agg(pl.col("rank", "step", "stage", "kind", "microbatch").first(), pl.len().alias("halves"))
        .with_columns(pl.when(pl.col("halves") > 1).then(pl.lit("F&B")).otherwise("kind").alias("kind"))
    )
    per_action = judged.group_by(_ACTION_KEY).agg(pl.col("cpu_ms", "shared_runq_ms").sum())
    typed = [pl.col(name).cast(pl.Int32()) for name in ("rank", "step", "stage", "microbatch")]
    return (
        keys.with_columns(typed)
        .join(per_action.with_columns(typed), on=_ACTION_KEY)
        .select(list(OP_CLOCK_SCHEMA))
        .sort("op")
    )


def on_own_clock(ops: pl.DataFrame, clock: pl.DataFrame | None) -> pl.DataFrame:
    """``ops`` (``OPS_SCHEMA``) with each compute op's duration on its rank's own clock where ``clock``
    (``OP_CLOCK_SCHEMA``) has its row; other ops as they are.

    The wait counted as the host's comes out of the op, never below its action's on-CPU time
    (``READY_IN_COMPUTE``).
    """
    if clock is None or clock.is_empty():
        return ops
    duration = pl.col("duration_ms")
    removed = pl.min_horizontal(pl.col("shared_runq_ms"), (duration - pl.col("cpu_ms")).clip(lower_bound=0.0))
    return (
        ops.with_row_index("op")
        .join(clock, on="op", how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("compute") & pl.col("cpu_ms").is_not_null())
            .then(duration - removed)
            .otherwise(duration)
        )
        .drop("op", "cpu_ms", "shared_runq_ms")
    )
