"""Where each rank's GPU time went: busy, compute, communication, memory, idle, per rank and per stream.

Definitions (docs/gpu.md repeats them, with where HTA differs):
- **window**: a rank's first GPU activity start to its last GPU activity end.
- **active span** of an activity: the whole activity, except a p2p (SendRecv) kernel, whose part
  before its peer's matching kernel started is **waiting**, not work (``p2p_waits``).
- **busy**: union of active spans; **idle** = window - busy (waiting counts as idle).
- **compute / communication / memory**: union of the active spans of that class; they may overlap
  each other, so they can sum to more than busy.
- **p2p_wait**: union of p2p waiting parts not covered by other work.
- **exposed communication**: communication not covered by compute (``tracekit.gpu.overlap``).

Not for: HTA's definitions (``tracekit.gpu.hta_compat``).
"""

from __future__ import annotations

import polars as pl

from tracekit.analysis.intervals import covered_ns, subtract_spans
from tracekit.gpu.kernel_classes import COMMUNICATION, COMPUTE, MEMORY, P2P

WAIT_SCHEMA: dict[str, pl.DataType] = {"wait_ns": pl.Int64(), "peer_rank": pl.Int32()}
"""Columns ``p2p_waits`` adds to GPU activities: for p2p kernels matched to a peer, the time from
the kernel's start until the peer's kernel started (clipped to [0, duration]) and the peer's rank;
0 and null for every other activity; null and null for a p2p kernel with no peer among the
loaded ranks (its wait is unknown and it counts as active: a warning says how many)."""

BREAKDOWN_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "window_ns": pl.Int64(),
    "busy_ns": pl.Int64(),
    "compute_ns": pl.Int64(),
    "comm_ns": pl.Int64(),
    "memory_ns": pl.Int64(),
    "p2p_wait_ns": pl.Int64(),
    "idle_ns": pl.Int64(),
    "busy_pct": pl.Float64(),
    "idle_pct": pl.Float64(),
}
"""Per rank, ns, as defined in the module docstring; percentages of the window."""

STREAM_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "stream": pl.Int64(),
    "activities": pl.UInt32(),
    "busy_ns": pl.Int64(),
    "compute_ns": pl.Int64(),
    "comm_ns": pl.Int64(),
    "memory_ns": pl.Int64(),
    "busy_pct": pl.Float64(),
}
"""Per (rank, device, stream): activity count, union of its active spans, by class, ns; busy as a
percentage of the rank's window."""


def p2p_waits(activities: pl.DataFrame) -> pl.DataFrame:
    """``activities`` (all ranks' GPU_SCHEMA rows) with ``WAIT_SCHEMA`` columns.

    A p2p kernel's peer is the p2p kernel on another rank that overlaps it in time and ends nearest
    to it (both sides of a transfer finish together); traces of one host share a clock, so this
    needs ranks whose clocks agree to a few µs.
    """
    p2p = activities.filter(pl.col("comm_class") == P2P).with_row_index("_row")
    matched = []
    for rank in p2p["rank"].unique().sort().to_list():
        mine = p2p.filter(pl.col("rank") == rank).sort("end_ns")
        others = (
            p2p.filter(pl.col("rank") != rank)
            .select(
                pl.col("rank").alias("peer_rank"),
                pl.col("start_ns").alias("peer_start"),
                pl.col("end_ns").alias("peer_end"),
            )
            .sort("peer_end")
        )
        if others.is_empty():
            matched.append(
                mine.select(
                    "_row",
                    pl.lit(None, pl.Int64()).alias("wait_ns"),
                    pl.lit(None, pl.Int32()).alias("peer_rank"),
                )
            )
            continue
        joined = mine.join_asof(others, left_on="end_ns", right_on="peer_end", strategy="nearest")
        overlaps = (pl.col("peer_start") < pl.col("end_ns")) & (pl.col("peer_end") > pl.col("start_ns"))
        wait = pl.min_horizontal(
            pl.max_horizontal(pl.col("peer_start") - pl.col("start_ns"), 0),
            pl.col("end_ns") - pl.col("start_ns"),
        )
        matched.append(
            joined.select(
                "_row",
                pl.when(overlaps).then(wait).alias("wait_ns"),
                pl.when(overlaps).then(pl.col("peer_rank")).alias("peer_rank"),
            )
        )
    waits = pl.concat(matched) if matched else pl.DataFrame(schema={"_row": pl.UInt32(), **WAIT_SCHEMA})
    others = activities.filter((pl.col("comm_class") != P2P) | pl.col("comm_class").is_null()).with_columns(
        pl.lit(0, pl.Int64()).alias("wait_ns"), pl.lit(None, pl.Int32()).alias("peer_rank")
    )
    p2p = p2p.join(waits.cast({"wait_ns": pl.Int64(), "peer_rank": pl.Int32()}), on="_row", how="left").drop(
        "_row"
    )
    return pl.concat([others, p2p.select(others.columns)]).sort("rank", "start_ns")


def active_spans(waited: pl.DataFrame) -> pl.DataFrame:
    """Each activity's active part (``start_ns`` moved past its wait); rows of ``p2p_waits`` output."""
    return waited.with_columns((pl.col("start_ns") + pl.col("wait_ns").fill_null(0)).alias("start_ns"))


def _by_class(active: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    result = covered_ns(active, by).rename({"covered_ns": "busy_ns"})
    for name, column in ((COMPUTE, "compute_ns"), (COMMUNICATION, "comm_ns"), (MEMORY, "memory_ns")):
        part = covered_ns(active.filter(pl.col("kernel_class") == name), by).rename({"covered_ns": column})
        result = result.join(part, on=by, how="left")
    return result.with_columns(pl.col("compute_ns", "comm_ns", "memory_ns").fill_null(0))


def rank_windows(activities: pl.DataFrame) -> pl.DataFrame:
    """Each rank's window: ``rank``, ``window_start_ns``, ``window_end_ns``, ``window_ns``."""
    return (
        activities.group_by("rank")
        .agg(pl.col("start_ns").min().alias("window_start_ns"), pl.col("end_ns").max().alias("window_end_ns"))
        .with_columns((pl.col("window_end_ns") - pl.col("window_start_ns")).alias("window_ns"))
    )


def gpu_breakdown(waited: pl.DataFrame) -> pl.DataFrame:
    """``BREAKDOWN_SCHEMA`` per rank from ``p2p_waits`` output."""
    active = active_spans(waited)
    windows = rank_windows(waited)
    wait_spans = waited.filter(pl.col("wait_ns") > 0).with_columns(
        (pl.col("start_ns") + pl.col("wait_ns")).alias("end_ns")
    )
    wait_alone = covered_ns(subtract_spans(wait_spans, active, ["rank"]), ["rank"]).rename(
        {"covered_ns": "p2p_wait_ns"}
    )
    return (
        windows.join(_by_class(active, ["rank"]), on="rank", how="left")
        .join(wait_alone, on="rank", how="left")
        .with_columns(pl.col("p2p_wait_ns").fill_null(0))
        .with_columns((pl.col("window_ns") - pl.col("busy_ns")).alias("idle_ns"))
        .with_columns(
            (100 * pl.col("busy_ns") / pl.col("window_ns")).alias("busy_pct"),
            (100 * pl.col("idle_ns") / pl.col("window_ns")).alias("idle_pct"),
        )
        .select(list(BREAKDOWN_SCHEMA))
        .cast(BREAKDOWN_SCHEMA)  # type: ignore[arg-type]
        .sort("rank")
    )


def stream_activity(waited: pl.DataFrame) -> pl.DataFrame:
    """``STREAM_SCHEMA`` per (rank, device, stream) from ``p2p_waits`` output."""
    by = ["rank", "device", "stream"]
    counts = waited.group_by(by).agg(pl.len().alias("activities"))
    return (
        _by_class(active_spans(waited), by)
        .join(counts, on=by)
        .join(rank_windows(waited).select("rank", "window_ns"), on="rank")
        .with_columns((100 * pl.col("busy_ns") / pl.col("window_ns")).alias("busy_pct"))
        .select(list(STREAM_SCHEMA))
        .cast(STREAM_SCHEMA)  # type: ignore[arg-type]
        .sort(by)
    )
