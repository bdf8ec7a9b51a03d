"""Each rank's compute on its own clock: wall time less the run-queue wait every rank shares.

Wall-clock durations cannot tell a rank that computes slowly from one whose process waited for a
core. The collector's probes (``tracekit.trace.probes``) split each action's wall time into
on-CPU, blocked (neither on a core nor waiting for one) and run-queue wait. On a CPU clock,
straggler scoring judges each action on its own clock:

- ``latency_ms``: a rank's run-queue wait per dispatch (each time its thread was put on a core) over
  the whole capture window, labelled or not: how long the host makes it wait for a core;
  ``latency_reference_ms``: the median of the other ranks' (the wait the host gives every rank);
- ``judged_ms = wall_ms - min(runq_ms, WAIT_TOLERANCE * latency_reference_ms * dispatches)``: the
  wait that the action's dispatches would have had on the other ranks' host is left out (with a
  tolerance: the scheduler makes a thread that uses up its slice wait longer per dispatch than one
  that sleeps, so a rank computing more than its peers waits somewhat longer per dispatch on the
  same host), so a busy host that
  slows every rank alike (uniform load) flags nobody, however often an action sleeps and wakes; a
  rank that waits longer per dispatch than its peers (a hog pinned beside it alone) keeps the
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
| shared_runq_ms | Float64 | min(the ``waiting_ms`` sum, WAIT_TOLERANCE x latency_reference_ms x dispatches): the wait every rank would have had | never null |
| factor | Float64 | judged_ms / wall_ms: what scoring multiplies the realized durations by | never null |

``RANK_CLOCK_SCHEMA``, one row per rank with probes: rank (Int32), runq_ms (Float64) and dispatches
(Int64) over the window, latency_ms (runq_ms / dispatches), latency_reference_ms (the other ranks'
median; the rank's own where no other rank has one), runq_known (Boolean).

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
    "runq_known": pl.Boolean(),
}

WAIT_TOLERANCE = 1.25
"""Wait per dispatch up to this multiple of the other ranks' counts as the host's (measured here: a
rank spinning beside sleeping peers waited 1.1x their wait per dispatch; one beside a pinned busy
process 1.4x to 2.2x)."""

UNCOUNTED_WAIT = (
    "an action whose thread was never put back on a core (0 dispatches) did not sleep: a sleep ends "
    "in a wake-up and a dispatch, so its time off a core is a wait for one that schedstat did not count"
)
"""Why such an action's wall - on-CPU - run-queue time counts as run-queue wait, not as blocked.

Measured on this 2-core VM (kernel 6.18): with a busy process at nice -10 pinned beside rank 1 of
a 4-rank 1F1B job, rank 1's forwards that schedstat counted no dispatch for took 30-45 ms of wall
for 3 ms of CPU, about the nice-0 share of a core beside a nice -10 process (1024 / 10572): the
busy process ran in between, uncounted; at load 2 to 10 without a hog, 1% to 34% of a capture's
undispatched actions lost more than 2 ms the same way."""

JUDGED_CLOCK = (
    "own clock: wall time less the run-queue wait its dispatches would have had on the other ranks "
    "(their median wait per dispatch over the window)"
)
"""The one sentence every output quotes for the clock compute is judged on when probes exist."""


def rank_contention(window: pl.DataFrame) -> pl.DataFrame:
    """``RANK_CLOCK_SCHEMA``: each rank's run-queue wait per dispatch against the other ranks' median."""
    if window.is_empty():
        return pl.DataFrame(schema=RANK_CLOCK_SCHEMA)
    rows = window.sort("rank").with_columns(
        (pl.col("runq_ms") / pl.col("dispatches").clip(lower_bound=1)).alias("latency_ms"),
        (pl.col("runq_ms").is_not_null() & pl.col("dispatches").is_not_null()).alias("runq_known"),
    )
    latencies, known = rows["latency_ms"].to_list(), rows["runq_known"].to_list()
    references = []
    for index, latency in enumerate(latencies):
        others = sorted(latencies[j] for j in range(len(latencies)) if j != index and known[j])
        references.append(statistics.median(others) if others and known[index] else latency)
    return rows.with_columns(pl.Series("latency_reference_ms", references, dtype=pl.Float64())).select(
        list(RANK_CLOCK_SCHEMA)
    )


def waiting_ms(probes: pl.DataFrame) -> pl.Expr:
    """Per action: its thread's run-queue wait, plus the other Python threads' while it was blocked.

    A thread that holds the GIL while it waits for a core blocks the action's thread: up to the
    action's blocked time (wall - on-CPU - own wait), the other Python threads' run-queue wait is
    the host's too.
    """
    runq = pl.col("runq_ms").fill_null(0.0)
    blocked = (pl.col("wall_ms") - pl.col("cpu_ms") - runq).clip(lower_bound=0.0)
    return runq + pl.min_horizontal(blocked, pl.col("peer_runq_ms").fill_null(0.0))


def uncounted_ms(probes: pl.DataFrame) -> pl.Expr:
    """Per action: where its thread was never put back on a core (0 dispatches), the rest of its time
    off a core beyond ``waiting_ms`` (``UNCOUNTED_WAIT``); 0 otherwise."""
    never_dispatched = pl.col("runq_ms").is_not_null() & (pl.col("dispatches") == 0)
    rest = (pl.col("wall_ms") - pl.col("cpu_ms") - waiting_ms(probes)).clip(lower_bound=0.0)
    return pl.when(never_dispatched).then(rest).otherwise(0.0)


def clock_factors(probes: pl.DataFrame, window: pl.DataFrame) -> pl.DataFrame:
    """``CLOCK_SCHEMA``: per (rank, step, stage, kind), the probes' sums and the judged-clock factor."""
    contention = rank_contention(window).select("rank", pl.col("latency_reference_ms").fill_null(0.0))
    return (
        probes.with_columns(
            waiting_ms(probes).alias("counted_ms"), uncounted_ms(probes).alias("uncounted_ms")
        )
        .group_by(CLOCK_KEY)
        .agg(
            pl.len().cast(pl.Int64()).alias("actions"),
            pl.col("wall_ms").sum(),
            pl.col("cpu_ms").sum(),
            pl.col("counted_ms").sum(),
            pl.col("uncounted_ms").sum(),
            pl.col("gc_ms").sum(),
            pl.col("dispatches").fill_null(0).sum().cast(pl.Int64()),
        )
        .join(contention, on="rank", how="left")
        .with_columns(
            # An undispatched action's uncounted wait has no dispatch to judge it by: none is the host's.
            (pl.col("counted_ms") + pl.col("uncounted_ms")).alias("runq_ms"),
            pl.min_horizontal(
                pl.col("counted_ms"),
                WAIT_TOLERANCE * pl.col("latency_reference_ms").fill_null(0.0) * pl.col("dispatches"),
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
