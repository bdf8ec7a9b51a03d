"""Communication stragglers: a pair of ranks whose transfers are slow while their compute is not.

Every cross-rank dependency of the realized schedule (``tracekit.whatif.pipeline``: F(s, m) needs
F(s-1, m), and so on) is a transfer from the producer's rank to the consumer's. Its *exposed
latency* is how long the consumer started after it could have: ``consumer start - max(latest
producer end, the consumer rank's previous action end)``, never below 0, charged to the link of
the producer that ended last. A slow producer makes the consumer wait, but not start late after
the data is there, so compute slowness is never charged to a link; a slow link shows in every
consumer it feeds.

- Link: an unordered pair of ranks, both directions together. Its latency is the median exposed
  latency of its transfers; the reference is the median over every other link's transfers (one
  slow link cannot set its own reference).
- Price: the run replayed with each consumer's exposed latency added to its duration (the replay
  then holds compute, dependencies and the latency the transfers exposed), and again with the
  link's latencies scaled to the reference (``reference / latency``, when above it); the saving is
  the difference of mean step times.
- Flagged: latency at least ``min_excess_ms`` over the reference and ``min_ratio`` times it, the
  saving at least ``min_saving_share`` of the measured step, and slow in more than
  ``persistent_share`` of the steps (a step's median latency ``min_excess_ms`` over the reference).

``LINK_SCHEMA``, one row per link with transfers, most costly first:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank_a, rank_b | Int32 | the two ranks, rank_a < rank_b | never null |
| transfers | Int64 | cross-rank dependencies over the link | never null |
| latency_ms | Float64 | median exposed latency, ms | never null |
| reference_ms | Float64 | median exposed latency over the other links, ms | there is no other link |
| slow_steps, steps | Int64 | steps whose median is min_excess_ms over the reference, steps | never null |
| saving_ms | Float64 | replayed step time saved with the link at the reference latency | no other link |
| step_ms | Float64 | mean measured step, ms | never null |
| step_ms_without | Float64 | step_ms - saving_ms | no other link |
| flagged | Boolean | a communication straggler | never null |

Not for: compute stragglers (``scoring``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.whatif.pipeline import cross_rank_dependencies, pipeline_case

LINK_SCHEMA: dict[str, pl.DataType] = {
    "rank_a": pl.Int32(),
    "rank_b": pl.Int32(),
    "transfers": pl.Int64(),
    "latency_ms": pl.Float64(),
    "reference_ms": pl.Float64(),
    "slow_steps": pl.Int64(),
    "steps": pl.Int64(),
    "saving_ms": pl.Float64(),
    "step_ms": pl.Float64(),
    "step_ms_without": pl.Float64(),
    "flagged": pl.Boolean(),
}



@dataclass(frozen=True)
class LinkConfig:
    """Thresholds of communication-straggler detection."""

    min_excess_ms: float = 3.0
    """Flag a link whose median exposed latency is at least this much above the other links' (ms)."""
    min_ratio: float = 2.0
    """... and at least this many times theirs."""
    min_saving_share: float = 0.05
    """... and whose reference latency would save at least this share of the step."""
    persistent_share: float = 0.5
    """... in more than this share of the steps."""

    def __post_init__(self) -> None:
        if self.min_excess_ms <= 0:
            raise ValueError("min_excess_ms must be > 0")
        if self.min_ratio < 1:
            raise ValueError("min_ratio must be >= 1")
        if not 0 <= self.min_saving_share < 1:
            raise ValueError("min_saving_share must be in [0, 1)")
        if not 0 < self.persistent_share <= 1:
            raise ValueError("persistent_share must be in (0, 1]")


def exposed_latencies(actions: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per consumer action with a cross-rank producer: row, link (rank_a, rank_b), step, latency_ms.

    Returns that frame and ``actions`` ordered and numbered (``row``) as it refers to them. The
    dependencies are the one rule's (``tracekit.whatif.pipeline.cross_rank_dependencies``).
    """
    ordered = (
        actions.sort("step", "rank", "start_ns", "end_ns")
        .with_row_index("row")
        .with_columns(
            pl.col("end_ns").cum_max().shift(1).over("step", "rank").alias("previous_end_ns"),
        )
    )
    latest = (
        cross_rank_dependencies(actions)
        .sort("src_end_ns", "src_rank", descending=[True, False])
        .group_by("step", "dst_rank", "dst_start_ns", maintain_order=True)
        .first()
    )
    consumers = (
        ordered.select("row", "step", "rank", "start_ns", "previous_end_ns")
        .join(
            latest.cast({"step": ordered.schema["step"], "dst_rank": ordered.schema["rank"]}),
            left_on=["step", "rank", "start_ns"],
            right_on=["step", "dst_rank", "dst_start_ns"],
        )
        .sort("row")
        .group_by("step", "rank", "start_ns", maintain_order=True)
        .first()  # an unlabelled pair's two halves start together: the latency counts once
    )
    ready = pl.max_horizontal("src_end_ns", pl.col("previous_end_ns").fill_null(pl.col("src_end_ns")))
    latencies = consumers.select(
        "row",
        pl.min_horizontal("rank", "src_rank").cast(pl.Int32()).alias("rank_a"),
        pl.max_horizontal("rank", "src_rank").cast(pl.Int32()).alias("rank_b"),
        pl.col("step").cast(pl.Int32()),
        (pl.max_horizontal(pl.lit(0), pl.col("start_ns") - ready) / 1e6).alias("latency_ms"),
    )
    return latencies, ordered.drop("previous_end_ns")


def _replayed_ms(actions: pl.DataFrame, extra_ms: np.ndarray) -> float:
    """Mean replayed step time with each action's start moved ``extra_ms`` earlier (its latency folded in)."""
    folded = actions.with_columns(pl.col("start_ns") - pl.Series(np.round(extra_ms * 1e6)).cast(pl.Int64()))
    case, _ = pipeline_case(folded.drop("row"), "links")
    return float(case.replay_step_times(case.ops["duration_ms"].to_numpy()).mean())


def slow_links(actions: pl.DataFrame, step_ms: float, config: LinkConfig | None = None) -> pl.DataFrame:
    """``LINK_SCHEMA`` for the realized ``actions`` (aligned clocks) of a run whose mean step is ``step_ms``."""
    config = config or LinkConfig()
    latencies, ordered = exposed_latencies(actions)
    if latencies.is_empty():
        return pl.DataFrame(schema=LINK_SCHEMA)
    extra = np.zeros(ordered.height)
    extra[latencies["row"].to_numpy()] = latencies["latency_ms"].to_numpy()
    folded_ms = _replayed_ms(ordered, extra)
    out = []
    links = latencies.select("rank_a", "rank_b").unique().sort("rank_a", "rank_b").iter_rows()
    for rank_a, rank_b in links:
        mine = (latencies["rank_a"] == rank_a) & (latencies["rank_b"] == rank_b)
        own, others = latencies.filter(mine), latencies.filter(~mine)
        latency = float(own["latency_ms"].median())  # type: ignore[arg-type]
        reference = float(others["latency_ms"].median()) if others.height else None  # type: ignore[arg-type]
        per_step = own.group_by("step").agg(pl.col("latency_ms").median())
        slow_steps = (
            int((per_step["latency_ms"] >= reference + config.min_excess_ms).sum()) if reference is not None else 0
        )
        saving = None
        if reference is not None:
            restored = extra.copy()
            rows = own["row"].to_numpy()
            # Scaled, not clipped: the link keeps its spread, loses its systematic excess.
            restored[rows] *= min(1.0, reference / latency) if latency > 0 else 1.0
            saving = folded_ms - _replayed_ms(ordered, restored)
        out.append(
            (rank_a, rank_b, own.height, latency, reference, slow_steps, per_step.height, saving)
        )
    frame = pl.DataFrame(out, schema=list(LINK_SCHEMA)[:8], orient="row")
    return (
        frame.with_columns(pl.lit(step_ms).alias("step_ms"))
        .with_columns(
            (pl.col("step_ms") - pl.col("saving_ms")).alias("step_ms_without"),
            (
                (pl.col("latency_ms") - pl.col("reference_ms") >= config.min_excess_ms)
                & (pl.col("latency_ms") >= config.min_ratio * pl.col("reference_ms"))
                & (pl.col("saving_ms") >= config.min_saving_share * pl.col("step_ms"))
                & (pl.col("slow_steps") > pl.col("steps") * config.persistent_share)
            )
            .fill_null(False)
            .alias("flagged"),
        )
        .cast(LINK_SCHEMA)  # type: ignore[arg-type]
        .sort(["flagged", "saving_ms", "rank_a", "rank_b"], descending=[True, True, False, False], nulls_last=True)
    )
