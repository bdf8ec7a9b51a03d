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
- ``uncounted_rate``: the wait schedstat did not count (``UNCOUNTED_WAIT``), in the actions it
  counted no dispatch for, per ms those actions spent on a core: with no dispatch to judge it by,
  it is judged by the work it waited beside (a fair scheduler makes every thread wait about alike
  per ms it runs); ``uncounted_allowance``: the same tolerance times the other ranks' upper quartile;
- ``judged_ms = wall_ms - min(counted wait, latency_allowance_ms * dispatches) - min(uncounted
  wait, uncounted_allowance * undispatched on-CPU ms)``: the wait that the action would have had
  on the other ranks' host is left out (with a tolerance: the scheduler makes a thread that uses
  up its slice wait longer per dispatch than one that sleeps, so a rank computing more than its
  peers waits somewhat longer per dispatch on the same host), so a busy host that slows every rank
  alike (uniform load) flags nobody, however often an action sleeps and wakes; a rank that waits
  longer than most of its peers (a hog pinned beside it alone) keeps the excess, so it is still
  flagged, and its cause is ``contended`` (``tracekit.stragglers.causes``).

GPU clocks are already the rank's own (kernel time), so nothing here applies to them.

``CLOCK_SCHEMA``, one row per (rank, step, stage, kind) with probes:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank, step, stage | Int32 | as in the realized actions | never null |
| kind | String | F, B, I, W or F&B | never null |
| actions | Int64 | actions with probes | never null |
| wall_ms, cpu_ms, runq_ms, gc_ms | Float64 | sums over those actions, ms (runq_ms: ``waiting_ms`` plus ``uncounted_ms``) | never null (runq_ms 0 where unknown) |
| dispatches | Int64 | times the thread was put on a core during them | never null (0 where unknown) |
| shared_runq_ms | Float64 | min(the ``waiting_ms`` sum, latency_allowance_ms x dispatches) + min(the ``uncounted_ms`` sum, uncounted_allowance x on-CPU ms of the undispatched actions): the wait every rank would have had | never null |
| factor | Float64 | judged_ms / wall_ms: what scoring multiplies the realized durations by | never null |

``RANK_CLOCK_SCHEMA``, one row per rank with probes: rank (Int32), runq_ms (Float64) and dispatches
(Int64) over the window, latency_ms (runq_ms / dispatches), latency_reference_ms (the other ranks'
median; the rank's own where no other rank has one), latency_allowance_ms (Float64, ``WAIT_TOLERANCE``
times the other ranks' upper quartile; the rank's own times it where no other rank has one),
runq_known (Boolean), uncounted_rate (Float64: its actions' ``uncounted_ms`` per ms on a core in
the actions never put back on one; null without probes or such actions) and uncounted_allowance
(Float64: the same allowance, of the other ranks' uncounted_rate).

Not for: scoring itself (``scoring``) or naming causes (``causes``).
"""

from __future__ import annotations

import statistics

import polars as pl

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
    "shared_runq_ms": pl.Float64(),
    "factor": pl.Float64(),
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

UPPER_QUARTILE = (
    "on a uniformly busy host the ranks' waits per dispatch spread: at load 10 to 12 on this 2-core VM "
    "(six busy processes, 4-rank DualPipeV), 1.85 to 3.49 ms in one capture, the third highest 1.46x "
    "the median of the rest; a rank is contended only beyond the upper quartile of the other ranks', "
    "which a busy process pinned beside one rank (2.3 to 11 times their median) still exceeds, and "
    "which a few hogged ranks among many do not raise for one another"
)
"""Why the allowance is set by the other ranks' upper quartile, not their median or their highest."""

UNCOUNTED_WAIT = (
    "an action whose thread was never put back on a core (0 dispatches) did not sleep: a sleep ends "
    "in a wake-up and a dispatch, so its time off a core is a wait for one that schedstat did not count"
)
"""Why such an action's wall - on-CPU - run-queue time counts as run-queue wait, not as blocked.

Measured on this 2-core VM (kernel 6.18): with a busy process at nice -10 pinned beside rank 1 of
a 4-rank 1F1B job, rank 1's forwards that schedstat counted no dispatch for took 30-45 ms of wall
for 3 ms of CPU, about the nice-0 share of a core beside a nice -10 process (1024 / 10572): the
busy process ran in between, uncounted; at load 2 to 10 without a hog, 1% to 34% of a capture's
undispatched actions lost more than 2 ms the same way. With six busy processes unpinned (load 10
to 12, 24 clean captures), most actions went undispatched and lost 0.01 to 6.2 ms per ms on a core
(every rank alike, so judged against the other ranks' upper quartile: ``uncounted_allowance``);
beside a pinned busy process (six captures, one per schedule), the hogged rank lost 10.7 to 14.4
ms per ms on a core against allowances of 0.7 to 2.4 from its peers. A spinning thread beside busy
processes, alone, has every wait counted; which kernel path leaves the job's waits uncounted was
not found."""

JUDGED_CLOCK = (
    f"own clock: wall time less the wait for a core the other ranks had too (up to {WAIT_TOLERANCE}x the "
    "upper quartile of their wait per dispatch over the window, and of their uncounted wait per ms on a core)"
)
"""The one sentence every output quotes for the clock compute is judged on when probes exist."""


def _beside_the_others(values: list[float | None]) -> tuple[list[float | None], list[float | None]]:
    """Per rank: (the other ranks' median, ``WAIT_TOLERANCE`` times their upper quartile) of
    ``values``; the rank's own value (times the tolerance) where no other rank has one."""
    references: list[float | None] = []
    allowances: list[float | None] = []
    for index, value in enumerate(values):
        others = sorted(other for j, other in enumerate(values) if j != index and other is not None)
        if value is None or not others:
            references.append(value)
            allowances.append(None if value is None else WAIT_TOLERANCE * value)
            continue
        references.append(statistics.median(others))
        upper = statistics.quantiles(others, n=4, method="inclusive")[2] if len(others) > 1 else others[0]
        allowances.append(WAIT_TOLERANCE * upper)
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
        undispatched = _never_dispatched()
        lost, on_core = uncounted_ms(probes).sum(), pl.col("cpu_ms").filter(undispatched).sum()
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


def _never_dispatched() -> pl.Expr:
    """Actions whose thread schedstat never counted being put back on a core."""
    return pl.col("runq_ms").is_not_null() & (pl.col("dispatches") == 0)


def uncounted_ms(probes: pl.DataFrame) -> pl.Expr:
    """Per action: where its thread was never put back on a core (0 dispatches), the rest of its time
    off a core beyond ``waiting_ms`` (``UNCOUNTED_WAIT``); 0 otherwise."""
    rest = (pl.col("wall_ms") - pl.col("cpu_ms") - waiting_ms(probes)).clip(lower_bound=0.0)
    return pl.when(_never_dispatched()).then(rest).otherwise(0.0)


def clock_factors(probes: pl.DataFrame, window: pl.DataFrame) -> pl.DataFrame:
    """``CLOCK_SCHEMA``: per (rank, step, stage, kind), the probes' sums and the judged-clock factor."""
    contention = rank_contention(window, probes).select(
        "rank", pl.col("latency_allowance_ms").fill_null(0.0), pl.col("uncounted_allowance").fill_null(0.0)
    )
    return (
        probes.with_columns(
            waiting_ms(probes).alias("counted_ms"),
            uncounted_ms(probes).alias("uncounted_ms"),
            pl.when(_never_dispatched()).then(pl.col("cpu_ms")).otherwise(0.0).alias("undispatched_cpu_ms"),
        )
        .group_by(CLOCK_KEY)
        .agg(
            pl.len().cast(pl.Int64()).alias("actions"),
            pl.col("wall_ms").sum(),
            pl.col("cpu_ms").sum(),
            pl.col("counted_ms").sum(),
            pl.col("uncounted_ms").sum(),
            pl.col("undispatched_cpu_ms").sum(),
            pl.col("gc_ms").sum(),
            pl.col("dispatches").fill_null(0).sum().cast(pl.Int64()),
        )
        .join(contention, on="rank", how="left")
        .with_columns(
            (pl.col("counted_ms") + pl.col("uncounted_ms")).alias("runq_ms"),
            # Counted waits are judged per dispatch; uncounted ones, with no dispatch, per ms on a core.
            (
                pl.min_horizontal(pl.col("counted_ms"), pl.col("latency_allowance_ms") * pl.col("dispatches"))
                + pl.min_horizontal(
                    pl.col("uncounted_ms"), pl.col("uncounted_allowance") * pl.col("undispatched_cpu_ms")
                )
            ).alias("shared_runq_ms")
        )
        .with_columns(
            pl.when(pl.col("wall_ms") > 0)
            .then((pl.col("wall_ms") - pl.col("shared_runq_ms")).clip(lower_bound=0.0) / pl.col("wall_ms"))
            .otherwise(1.0)
            .alias("factor")
        )
        .select(list(CLOCK_SCHEMA))
        .sort(CLOCK_KEY)
    )


def on_own_clock(ops: pl.DataFrame, clock: pl.DataFrame | None) -> pl.DataFrame:
    """``ops`` (``OPS_SCHEMA``) with each compute op's duration on its rank's own clock where ``clock``
    (``CLOCK_SCHEMA``) has a factor for its (rank, step, stage, kind); other ops as they are."""
    if clock is None or clock.is_empty():
        return ops
    factors = clock.select("rank", pl.col("step").cast(pl.Int64()), "stage", pl.col("kind").alias("optype"), "factor")
    return (
        ops.join(factors, on=["rank", "step", "stage", "optype"], how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("compute"))
            .then(pl.col("duration_ms") * pl.col("factor").fill_null(1.0))
            .otherwise(pl.col("duration_ms"))
            .alias("duration_ms")
        )
        .drop("factor")
    )
