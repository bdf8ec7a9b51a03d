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

    A p2p kernel's peer is the p2p kernel on another rank that ends nearest to it (both sides of a
    transfer finish together), provided the two overlap in time; traces of one host share a clock,
    so this needs ranks whose clocks agree to a few µs. Ties: an equal end wins, then the later end;
    among kernels ending together, the highest rank's last in ``activities`` order (what an as-of
    join over the other ranks' kernels sorted by end picks). One pass over every rank's kernels
    sorted by end time (``_nearest_peers``), not one per rank.
    """
    p2p = activities.filter(pl.col("comm_class") == P2P).with_row_index("_row")
    waits = _nearest_peers(p2p.select("_row", "rank", "start_ns", "end_ns"))
    others = activities.filter((pl.col("comm_class") != P2P) | pl.col("comm_class").is_null()).with_columns(
        pl.lit(0, pl.Int64()).alias("wait_ns"), pl.lit(None, pl.Int32()).alias("peer_rank")
    )
    p2p = p2p.join(waits, on="_row", how="left").drop("_row")
    return pl.concat([others, p2p.select(others.columns)]).sort("rank", "start_ns")


def _end_times(p2p: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct p2p end time (``pos`` in time order): the kernels that end then, by rank.

    ``rank_a``/``start_a`` is the highest rank's last kernel (by ``_row``) ending then, ``rank_b``/
    ``start_b`` the same among the other ranks (null when one rank alone ends then: ``only_rank``). End
    times in a row with the same ``only_rank`` form a run (``run_first``..``run_last``): a kernel of
    that rank looks past the whole run for a peer.
    """
    last_rank = pl.col("rank").last()
    other = pl.col("rank") != last_rank
    ends = (
        p2p.sort("end_ns", "rank", "_row")
        .group_by("end_ns", maintain_order=True)
        .agg(
            pl.col("rank").n_unique().alias("n_ranks"),
            last_rank.alias("rank_a"),
            pl.col("start_ns").last().alias("start_a"),
            pl.col("rank").filter(other).last().alias("rank_b"),
            pl.col("start_ns").filter(other).last().alias("start_b"),
        )
        .with_row_index("pos")
        .with_columns(
            pl.col("pos").cast(pl.Int64()),
            pl.when(pl.col("n_ranks") == 1).then(pl.col("rank_a")).alias("only_rank"),
        )
    )
    only = pl.col("only_rank")
    new_run = only.is_null() | only.ne_missing(only.shift(1))
    return (
        ends.with_columns(new_run.cum_sum().alias("_run"))
        .with_columns(
            pl.col("pos").min().over("_run").alias("run_first"),
            pl.col("pos").max().over("_run").alias("run_last"),
        )
        .drop("_run")
    )


def _nearest_peers(p2p: pl.DataFrame) -> pl.DataFrame:
    """``_row``, ``wait_ns``, ``peer_rank`` of each p2p kernel (``_row``, ``rank``, ``start_ns``, ``end_ns``).

    The candidates are the kernel's own end time when another rank ends then too, else the nearest
    earlier and the nearest later end time that some other rank has (``_end_times`` runs); so every
    kernel is matched with a few joins over all ranks at once.
    """
    if p2p.is_empty():
        return pl.DataFrame(schema={"_row": p2p.schema["_row"], **WAIT_SCHEMA})
    ends = _end_times(p2p)
    last = ends.height - 1
    neighbours = ends.select(
        "end_ns",
        "pos",
        "n_ranks",
        pl.col("only_rank").shift(1).alias("prev_only"),
        pl.col("run_first").shift(1).alias("prev_run_first"),
        pl.col("only_rank").shift(-1).alias("next_only"),
        pl.col("run_last").shift(-1).alias("next_run_last"),
    )
    rank, pos = pl.col("rank"), pl.col("pos")
    lower = (
        pl.when(pos == 0)
        .then(None)
        .when(pl.col("prev_only") == rank)
        .then(pl.col("prev_run_first") - 1)
        .otherwise(pos - 1)
    )
    upper = (
        pl.when(pos == last)
        .then(None)
        .when(pl.col("next_only") == rank)
        .then(pl.col("next_run_last") + 1)
        .otherwise(pos + 1)
    )
    end_at = ends.select("pos", "end_ns")
    candidates = (
        p2p.join(neighbours, on="end_ns", how="left")
        .with_columns(
            pl.when(lower >= 0).then(lower).alias("lower"),
            pl.when(upper <= last).then(upper).alias("upper"),
        )
        .join(end_at.rename({"pos": "lower", "end_ns": "lower_end"}), on="lower", how="left")
        .join(end_at.rename({"pos": "upper", "end_ns": "upper_end"}), on="upper", how="left")
    )
    nearer_upper = (pl.col("upper_end") - pl.col("end_ns")) <= (pl.col("end_ns") - pl.col("lower_end"))
    chosen = (
        pl.when(pl.col("n_ranks") >= 2)
        .then(pos)
        .when(pl.col("lower").is_null())
        .then(pl.col("upper"))
        .when(pl.col("upper").is_null() | ~nearer_upper)
        .then(pl.col("lower"))
        .otherwise(pl.col("upper"))
    )
    peers = ends.select(
        pl.col("pos").alias("chosen"),
        pl.col("end_ns").alias("peer_end"),
        "rank_a",
        "start_a",
        "rank_b",
        "start_b",
    )
    matched = (
        candidates.select("_row", "rank", "start_ns", "end_ns", chosen.alias("chosen"))
        .join(peers, on="chosen", how="left")
        .with_columns(
            pl.when(pl.col("rank_a") != rank).then("rank_a").otherwise("rank_b").alias("peer_rank"),
            pl.when(pl.col("rank_a") != rank).then("start_a").otherwise("start_b").alias("peer_start"),
        )
    )
    overlaps = (pl.col("peer_start") < pl.col("end_ns")) & (pl.col("peer_end") > pl.col("start_ns"))
    wait = pl.min_horizontal(
        pl.max_horizontal(pl.col("peer_start") - pl.col("start_ns"), 0),
        pl.col("end_ns") - pl.col("start_ns"),
    )
    return matched.select(
        "_row",
        pl.when(overlaps).then(wait).alias("wait_ns"),
        pl.when(overlaps).then(pl.col("peer_rank")).alias("peer_rank"),
    ).cast(WAIT_SCHEMA)  # type: ignore[arg-type]


def active_spans(waited: pl.DataFrame) -> pl.DataFrame:
    """Each activity's active part (``start_ns`` moved past its wait); rows of ``p2p_waits`` output."""
    return waited.with_columns((pl.col("start_ns") + pl.col("wait_ns").fill_null(0)).alias("start_ns"))


CLASS_COLUMNS = ((COMPUTE, "compute_ns"), (COMMUNICATION, "comm_ns"), (MEMORY, "memory_ns"))
"""Kernel class -> the column of its busy time."""


def _by_class(active: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    result = covered_ns(active, by).rename({"covered_ns": "busy_ns"})
    classes = [name for name, _ in CLASS_COLUMNS]
    # One union grouped by class too, rather than a union per class.
    per_class = covered_ns(active.filter(pl.col("kernel_class").is_in(classes)), [*by, "kernel_class"])
    for name, column in CLASS_COLUMNS:
        part = per_class.filter(pl.col("kernel_class") == name).select(*by, pl.col("covered_ns").alias(column))
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
