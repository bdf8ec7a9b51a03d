"""Each rank's compute on its own clock: wall time less the run-queue wait every rank shares.

Wall-clock durations cannot tell a rank that computes slowly from one whose process waited for a
core. The collector's probes (``tracekit.trace.probes``) split each action's wall time into
on-CPU, blocked (neither on a core nor waiting for one) and run-queue wait. On a CPU clock,
straggler scoring judges each action on its own clock:

- ``own_ms = wall_ms - runq_ms``: what the rank itself spent (computing, sleeping, in GC);
- ``k``: a rank's run-queue wait per ms of its own time (``Σ runq_ms / Σ own_ms`` over its compute
  actions); ``k_reference``: the median ``k`` of the other ranks with probes, the contention the
  host gives every rank;
- ``judged_ms = own_ms * (1 + max(0, k - k_reference))``: a busy host that slows every rank alike
  (uniform load) adds nothing, so it flags nobody; a rank that waits for a core more than its peers
  (a hog pinned beside it alone) keeps that excess, so it is still flagged, and its cause is
  ``contended`` (``tracekit.stragglers.causes``).

GPU clocks are already the rank's own (kernel time), so nothing here applies to them.

``CLOCK_SCHEMA``, one row per (rank, step, stage, kind) with probes:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank, step, stage | Int32 | as in the realized actions | never null |
| kind | String | F, B, I, W or F&B | never null |
| actions | Int64 | actions with probes | never null |
| wall_ms, cpu_ms, runq_ms, gc_ms | Float64 | sums over those actions, ms | never null (runq_ms 0 where unknown) |
| factor | Float64 | judged_ms / wall_ms: what scoring multiplies the realized durations by | never null |

``RANK_CLOCK_SCHEMA``, one row per rank with probes: rank (Int32), own_ms, runq_ms (Float64, sums),
k, k_reference, excess (Float64: max(0, k - k_reference)), runq_known (Boolean).

Not for: scoring itself (``scoring``) or naming causes (``causes``).
"""

from __future__ import annotations

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
    "factor": pl.Float64(),
}

RANK_CLOCK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "own_ms": pl.Float64(),
    "runq_ms": pl.Float64(),
    "k": pl.Float64(),
    "k_reference": pl.Float64(),
    "excess": pl.Float64(),
    "runq_known": pl.Boolean(),
}

JUDGED_CLOCK = "own clock: wall time less the run-queue wait the other ranks also had (judged = own x (1 + excess k))"
"""The one sentence every output quotes for the clock compute is judged on when probes exist."""


def rank_contention(probes: pl.DataFrame) -> pl.DataFrame:
    """``RANK_CLOCK_SCHEMA``: each rank's run-queue wait per own ms against the other ranks' median."""
    if probes.is_empty():
        return pl.DataFrame(schema=RANK_CLOCK_SCHEMA)
    per_rank = (
        probes.group_by("rank")
        .agg(
            (pl.col("wall_ms") - pl.col("runq_ms").fill_null(0.0)).sum().alias("own_ms"),
            pl.col("runq_ms").fill_null(0.0).sum().alias("runq_ms"),
            pl.col("runq_ms").is_not_null().all().alias("runq_known"),
        )
        .with_columns((pl.col("runq_ms") / pl.col("own_ms").clip(lower_bound=1e-9)).alias("k"))
        .sort("rank")
    )
    ranks, ks, known = per_rank["rank"].to_list(), per_rank["k"].to_list(), per_rank["runq_known"].to_list()
    references = []
    for index, k in enumerate(ks):
        others = sorted(ks[j] for j in range(len(ks)) if j != index and known[j])
        references.append(_median(others) if others and known[index] else k)
    return per_rank.with_columns(
        pl.Series("k_reference", references, dtype=pl.Float64()),
    ).with_columns(
        (pl.col("k") - pl.col("k_reference")).clip(lower_bound=0.0).alias("excess")
    ).select(list(RANK_CLOCK_SCHEMA)).with_columns(pl.Series("rank", ranks, dtype=pl.Int32()))


def _median(values: list[float]) -> float:
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def clock_factors(probes: pl.DataFrame) -> pl.DataFrame:
    """``CLOCK_SCHEMA``: per (rank, step, stage, kind), the probes' sums and the judged-clock factor."""
    contention = rank_contention(probes)
    return (
        probes.group_by(CLOCK_KEY)
        .agg(
            pl.len().cast(pl.Int64()).alias("actions"),
            pl.col("wall_ms").sum(),
            pl.col("cpu_ms").sum(),
            pl.col("runq_ms").fill_null(0.0).sum(),
            pl.col("gc_ms").sum(),
        )
        .join(contention.select("rank", "excess"), on="rank", how="left")
        .with_columns(
            pl.when(pl.col("wall_ms") > 0)
            .then((pl.col("wall_ms") - pl.col("runq_ms")).clip(lower_bound=0.0) * (1 + pl.col("excess")) / pl.col("wall_ms"))
            .otherwise(1.0)
            .alias("factor")
        )
        .select(list(CLOCK_SCHEMA))
        .sort(CLOCK_KEY)
    )
