"""Straggler scoring: each rank's compute, per action kind, against peers doing comparable work.

Only compute is judged: communication and waiting are excluded because collectives and p2p
transfers equalize wall time (the rank waited on looks as slow as the one it waits for).

- Own median: the rank's median duration of that kind (F, B, I, W, F&B; op-table: forward-compute,
  backward-compute) over all its actions.
- Peers: the other ranks that run the same kind on the same ``work`` (op-table: the same stage,
  i.e. the data-parallel replicas; Kineto: the same place on the micro-batch path, first, middle
  or last stage, since the first stage's input gradient and the last stage's loss make their work
  differ). A rank with no such peer is not judged (its stage's imbalance is the what-if's
  ``by_stage``, not a straggler). The peer median is the median of the peers' medians, the rank
  itself excluded so one straggler cannot pull its own reference.
- Score: ``peer median / own median`` (nvidia-resiliency-ext's straggler score: 1 is typical,
  below 1 slower). A (rank, kind) is flagged, named a straggler, when its score is below
  ``threshold`` (0.75: 33% slower), the slowness is persistent, and bringing it to peer speed would
  save at least ``min_saving_share`` of the step (5%). One-off slowness, slowness the pipeline
  absorbs in its bubbles, and jitter on an oversubscribed host stay visible in the scores, unflagged.
- Persistence: the same score per step; ``persistent`` when more than ``persistent_share`` of the
  steps are below the threshold, ``one-off`` when some but no more are, ``none`` otherwise.
- Harm: replay the run (``tracekit.whatif``) with that rank's actions of that kind scaled to peer
  speed (a rank at or above peer speed stays as it is: it has nothing to give back); the saving is
  the realized step time minus the replayed one, applied to the measured step.

``SCORE_SCHEMA``, one row per (rank, kind):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| kind | String | action kind / compute op type | never null |
| work | String | what else sets the work apart (``tracekit.whatif.case``: stage, or first/middle/last) | never null |
| peers | Int64 | other ranks running the same kind on the same work (0: the row cannot be judged) | never null |
| stages | String | stages the rank runs this kind on, comma-separated | never null |
| actions | Int64 | actions judged | never null |
| median_ms | Float64 | own median duration, ms | never null |
| peer_median_ms | Float64 | median of the peers' medians, ms | no peers run this kind |
| score | Float64 | peer_median_ms / median_ms | no peers |
| slow_steps | Int64 | steps whose own score is below the threshold | never null |
| steps | Int64 | steps the rank ran this kind in | never null |
| pattern | String | persistent, one-off or none | never null |
| flagged | Boolean | score < threshold, pattern persistent, saving_ms >= min_saving_share * step_ms | never null |
| step_ms | Float64 | mean measured step time, ms | never null |
| step_ms_at_peer_speed | Float64 | step_ms minus the replayed saving, ms | no peers |
| saving_ms | Float64 | step_ms - step_ms_at_peer_speed | no peers |
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.whatif.case import ReplayCase

SCORE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "kind": pl.String(),
    "work": pl.String(),
    "peers": pl.Int64(),
    "stages": pl.String(),
    "actions": pl.Int64(),
    "median_ms": pl.Float64(),
    "peer_median_ms": pl.Float64(),
    "score": pl.Float64(),
    "slow_steps": pl.Int64(),
    "steps": pl.Int64(),
    "pattern": pl.String(),
    "flagged": pl.Boolean(),
    "step_ms": pl.Float64(),
    "step_ms_at_peer_speed": pl.Float64(),
    "saving_ms": pl.Float64(),
}


@dataclass(frozen=True)
class StragglerConfig:
    """Thresholds of straggler scoring."""

    threshold: float = 0.75
    """Flag a rank whose score (peer median / own median) is below this (nvidia-resiliency-ext: 0.75)."""
    min_saving_share: float = 0.05
    """Flag only when peer speed would save at least this share of the measured step time."""
    persistent_share: float = 0.5
    """Slow in more than this share of steps: persistent; slow in fewer (but some): one-off."""

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        if not 0 <= self.min_saving_share < 1:
            raise ValueError("min_saving_share must be in [0, 1)")
        if not 0 < self.persistent_share <= 1:
            raise ValueError("persistent_share must be in (0, 1]")


def _peer_reference(medians: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """For each (rank, kind, work[, step]) the median of its peers' medians (see module docstring)."""
    keys = ["kind", *by]
    rows = []
    for _key, group in medians.group_by(keys, maintain_order=True):
        ranks, works, values = group["rank"].to_list(), group["work"].to_list(), group["median_ms"].to_list()
        for index, (rank, work) in enumerate(zip(ranks, works)):
            peers = [v for j, v in enumerate(values) if ranks[j] != rank and works[j] == work]
            rows.append(
                {
                    **{k: group[k][index] for k in keys},
                    "rank": rank,
                    "work": work,
                    "peers": len(peers),
                    "peer_median_ms": float(np.median(peers)) if peers else None,
                }
            )
    schema = {k: medians.schema[k] for k in keys} | {
        "rank": pl.Int32(),
        "work": pl.String(),
        "peers": pl.Int64(),
        "peer_median_ms": pl.Float64(),
    }
    return pl.DataFrame(rows, schema=schema)


def _medians(compute: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    stages = compute.group_by("rank", "optype", "work").agg(
        pl.col("stage").unique().sort().cast(pl.String()).str.join(",").alias("stages")
    )
    return (
        compute.group_by("rank", "optype", "work", *by)
        .agg(pl.col("duration_ms").median().alias("median_ms"), pl.len().cast(pl.Int64()).alias("actions"))
        .join(stages, on=["rank", "optype", "work"])
        .rename({"optype": "kind"})
        .sort("rank", "kind", "work", *by)
    )


def _saving_ms(
    case: ReplayCase, real: np.ndarray, realized_ms: float, rank: int, kind: str, work: str, factor: float
) -> float:
    """Replayed step-time saving when ``rank``'s ``kind`` actions of ``work`` run ``factor`` times as long.

    ``real`` is every op's own duration and ``realized_ms`` the mean step time replayed with it.
    """
    rows = ((case.ops["rank"] == rank) & (case.ops["optype"] == kind) & (case.ops["work"] == work)).to_numpy()
    faster = np.where(rows, real * factor, real)
    return float(realized_ms - case.replay_step_times(faster).mean())


def score_stragglers(case: ReplayCase, config: StragglerConfig | None = None) -> pl.DataFrame:
    """One row per (rank, compute kind) in ``SCORE_SCHEMA``, most harmful first."""
    config = config or StragglerConfig()
    compute = case.ops.filter(pl.col("compute"))
    overall = _medians(compute, [])
    overall = overall.join(_peer_reference(overall, []), on=["kind", "rank", "work"])
    per_step = _medians(compute, ["step"])
    per_step = per_step.join(_peer_reference(per_step, ["step"]), on=["kind", "step", "rank", "work"])
    persistence = per_step.group_by("rank", "kind", "work").agg(
        (pl.col("peer_median_ms") / pl.col("median_ms") < config.threshold)
        .sum()
        .cast(pl.Int64())
        .alias("slow_steps"),
        pl.len().cast(pl.Int64()).alias("steps"),
    )
    step_ms = float(case.measured_ms().mean())
    table = (
        overall.join(persistence, on=["rank", "kind", "work"])
        .with_columns((pl.col("peer_median_ms") / pl.col("median_ms")).alias("score"))
        .with_columns(
            pl.when(pl.col("slow_steps") > pl.col("steps") * config.persistent_share)
            .then(pl.lit("persistent"))
            .when(pl.col("slow_steps") > 0)
            .then(pl.lit("one-off"))
            .otherwise(pl.lit("none"))
            .alias("pattern"),
        )
    )
    real = case.ops["duration_ms"].to_numpy()
    realized_ms = case.replay_step_times(real).mean()
    savings = [
        None
        if score is None or math.isnan(score)
        else _saving_ms(case, real, realized_ms, rank, kind, work, min(1.0, score))
        for rank, kind, work, score in table.select("rank", "kind", "work", "score").iter_rows()
    ]
    table = table.with_columns(
        pl.lit(step_ms).alias("step_ms"),
        pl.Series("saving_ms", savings, dtype=pl.Float64()),
    ).with_columns(
        (pl.col("step_ms") - pl.col("saving_ms")).alias("step_ms_at_peer_speed"),
        (
            (pl.col("score") < config.threshold)
            & (pl.col("pattern") == "persistent")
            & (pl.col("saving_ms") >= config.min_saving_share * pl.col("step_ms"))
        )
        .fill_null(False)
        .alias("flagged"),
    )
    return (
        table.select(list(SCORE_SCHEMA))
        .cast(SCORE_SCHEMA)  # type: ignore[arg-type]
        # rank, kind and work break ties, so the order is the same on every run.
        .sort(
            ["flagged", "saving_ms", "score", "rank", "kind", "work"],
            descending=[True, True, False, False, False, False],
            nulls_last=True,
        )
    )


def describe(row: dict) -> str:
    """One plain sentence for a scored row: how much slower, and what the step would take at peer speed."""
    slower = 1 / row["score"] - 1
    change = -row["saving_ms"] / row["step_ms"]
    return (
        f"rank {row['rank']} runs {row['kind']} {slower:.0%} {'slower' if slower >= 0 else 'faster'} than its peers; "
        f"at peer speed the step would take {row['step_ms_at_peer_speed']:.0f} ms instead of "
        f"{row['step_ms']:.0f} ms ({change:+.0%})"
    )
