"""Communication stragglers: a pair of ranks whose transfers are slow while their compute is not.

Every cross-rank dependency of the realized schedule (``tracekit.analysis.dependencies``: F(s, m) needs
F(s-1, m), and so on) is a transfer from the producer's rank to the consumer's. Its *exposed
latency* is how long the consumer started after it could have: ``consumer start - max(latest
producer end, the consumer rank's previous action end)``, never below 0, charged to the link of
the producer that ended last. A slow producer makes the consumer wait, but not start late after
the data is there, so compute slowness is never charged to a link; a slow link shows in every
consumer it feeds.

- Link: an unordered pair of ranks, both directions together. Its latency is the median exposed
  latency of its transfers; the reference is the median over every other link's transfers (one
  slow link cannot set its own reference).
- Price: the run replayed as recorded (each op its duration plus its gap, ``tracekit.whatif.case``:
  compute, dependencies and the latency the transfers exposed), and again with the link's
  latencies scaled to the reference (``reference / latency``, when above it: each consumer starts
  that much sooner after its data); the saving is the difference of mean step times. Every link's
  counterfactual replays in one batch, each only over what its consumers reach
  (``tracekit.whatif.counterfactuals``).
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

import numpy as np
import polars as pl

from tracekit.analysis.choices import LinkConfig as LinkConfig
from tracekit.analysis.dependencies import cross_rank_dependencies
from tracekit.analysis.medians import middle_without
from tracekit.whatif.counterfactuals import Change, Counterfactuals
from tracekit.whatif.pipeline import pipeline_case_nodes

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


def exposed_latencies(actions: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per consumer action with a cross-rank producer: row, link (rank_a, rank_b), step, latency_ms.

    Returns that frame and ``actions`` ordered and numbered (``row``) as it refers to them. The
    dependencies are the one rule's (``tracekit.analysis.dependencies.cross_rank_dependencies``).
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


class _LinkReplay:
    """The run replayed as it was recorded, and again with chosen transfers' latencies cut.

    Every op occupies its duration plus its gap (``tracekit.whatif.case``: how long after what it
    waits for it started), so the base replay reruns the recorded steps; a consumer's exposed
    latency is part of its gap. A cut shortens only the consumers' nodes, so each link's
    counterfactual replays only the components its consumers reach.
    """

    def __init__(self, ordered: pl.DataFrame) -> None:
        case, _, self.node = pipeline_case_nodes(ordered.drop("row"), "links")
        assert (case.ops["node"].to_numpy() == np.arange(case.ops.height)).all(), "one op per node"
        self.gap_ms = case.ops["gap_ms"].to_numpy()
        self.occupied = case.occupied_ms(case.ops["duration_ms"].to_numpy())
        self.replays = Counterfactuals(case, self.occupied)
        self.recorded_ms = float(self.replays.base_steps.mean())

    def change(self, rows: np.ndarray, cut_ms: np.ndarray) -> Change:
        """The run with consumer ``rows`` (of ``ordered``) starting ``cut_ms`` sooner, never before ready."""
        nodes, position = np.unique(self.node[rows], return_inverse=True)
        cut = np.zeros(nodes.size)
        np.add.at(cut, position, cut_ms)
        return Change(nodes, self.occupied[nodes] - np.minimum(cut, np.maximum(self.gap_ms[nodes], 0.0)))


def _link_bounds(frame: pl.DataFrame) -> tuple[pl.DataFrame, dict[tuple[int, int], tuple[int, int]]]:
    """``frame`` sorted by link (rows of a link in their order) and each link's [start, stop) in it."""
    ordered = frame.with_row_index("_order").sort("rank_a", "rank_b", "_order").drop("_order")
    a, b = ordered["rank_a"].to_numpy(), ordered["rank_b"].to_numpy()
    starts = np.flatnonzero((np.diff(a, prepend=-1) != 0) | (np.diff(b, prepend=-1) != 0))
    stops = np.append(starts[1:], ordered.height)
    return ordered, {
        (int(a[lo]), int(b[lo])): (int(lo), int(hi)) for lo, hi in zip(starts.tolist(), stops.tolist())
    }


def _median_of_sorted(values: np.ndarray) -> float:
    """Median of sorted ``values`` as polars takes it (linear interpolation between the middle two)."""
    middle = values.size // 2
    if values.size % 2:
        return float(values[middle])
    lower, upper = float(values[middle - 1]), float(values[middle])
    return lower if lower == upper else 0.5 * (upper - lower) + lower


def _median_without(ordered_values: np.ndarray, positions: np.ndarray) -> float | None:
    """Median of sorted ``ordered_values`` without the elements at sorted ``positions``; None when none remain."""
    middle = middle_without(ordered_values, positions)
    return _median_of_sorted(middle) if middle.size else None


def slow_links(actions: pl.DataFrame, step_ms: float, config: LinkConfig | None = None) -> pl.DataFrame:
    """``LINK_SCHEMA`` for the realized ``actions`` (aligned clocks) of a run whose mean step is ``step_ms``."""
    config = config or LinkConfig()
    latencies, ordered = exposed_latencies(actions)
    if latencies.is_empty():
        return pl.DataFrame(schema=LINK_SCHEMA)
    replay = _LinkReplay(ordered)
    by_latency = np.lexsort((np.arange(latencies.height), latencies["latency_ms"].to_numpy()))
    sorted_latency = latencies["latency_ms"].to_numpy()[by_latency]
    place = np.empty(latencies.height, dtype=np.int64)  # each transfer's place in latency order
    place[by_latency] = np.arange(latencies.height)
    step_medians = latencies.group_by("rank_a", "rank_b", "step").agg(pl.col("latency_ms").median())
    steps_ordered, steps_of = _link_bounds(step_medians)
    step_latency = steps_ordered["latency_ms"].to_numpy()
    transfers, transfers_of = _link_bounds(latencies.with_row_index("position"))
    latency_ms, rows_of = transfers["latency_ms"].to_numpy(), transfers["row"].to_numpy()
    position = transfers["position"].to_numpy().astype(np.int64)
    links, changes = [], []
    for rank_a, rank_b in sorted(transfers_of):
        lo, hi = transfers_of[(rank_a, rank_b)]
        step_lo, step_hi = steps_of[(rank_a, rank_b)]
        latency = _median_of_sorted(np.sort(latency_ms[lo:hi]))
        reference = _median_without(sorted_latency, np.sort(place[position[lo:hi]]))
        slow_steps = (
            int((step_latency[step_lo:step_hi] >= reference + config.min_excess_ms).sum())
            if reference is not None
            else 0
        )
        links.append((rank_a, rank_b, hi - lo, latency, reference, slow_steps, step_hi - step_lo))
        if reference is not None:
            # Scaled, not clipped: the link keeps its spread, loses its systematic excess.
            scale = min(1.0, reference / latency) if latency > 0 else 1.0
            changes.append((len(links) - 1, replay.change(rows_of[lo:hi], latency_ms[lo:hi] * (1.0 - scale))))
    replayed = replay.replays.step_times([change for _, change in changes])
    savings: list[float | None] = [None] * len(links)
    for (index, _), times in zip(changes, replayed):
        savings[index] = replay.recorded_ms - float(times.mean())
    out = [(*link, saving) for link, saving in zip(links, savings)]
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
        .sort(
            ["flagged", "saving_ms", "rank_a", "rank_b"],
            descending=[True, True, False, False],
            nulls_last=True,
        )
    )
