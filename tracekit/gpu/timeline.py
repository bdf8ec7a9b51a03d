"""The GPU timeline of a rank: its kernels, copies and memsets, classified and tied to their CPU launch.

``gpu_timeline`` turns event-table rows into one row per GPU activity (``GPU_SCHEMA``), joined to
the ``cuda_runtime``/``cuda_driver`` call that launched it through the correlation id, and checks
what would make later figures wrong: activities without a launch, activities that overlap the
previous one on their own stream, names that look like communication yet were classed compute.
``project_spans`` then maps CPU-side spans (schedule actions, sub-chunk labels) onto the GPU work
launched inside them: a span's GPU extent is the first start to the last end of that work, with
its busy time and the GPU idle inside it that waited on the span's CPU launches (``launch_wait``).

Not for: busy/idle figures (``tracekit.gpu.breakdown``) or overlap (``tracekit.gpu.overlap``).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.analysis.intervals import covered_ns
from tracekit.gpu.kernel_classes import (
    GPU_CATEGORIES,
    KERNEL_PATTERNS,
    KernelPattern,
    classify,
    suspect_compute,
)

LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")

GPU_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "stream": pl.Int64(),
    "cat": pl.String(),
    "name": pl.String(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "correlation": pl.Int64(),
    "kernel_class": pl.String(),
    "comm_class": pl.String(),
    "launch_ns": pl.Int64(),
    "launch_end_ns": pl.Int64(),
}
"""One row per GPU activity. ``device`` falls back to the GPU pid and ``stream`` to the tid when
``args`` lack them; ``correlation``, ``launch_ns`` and ``launch_end_ns`` (start and end of the
launching CPU call, ns) are null when the trace does not link the activity to a launch;
``comm_class`` is null unless communication."""

STREAM_KEY_EXPRS: tuple[pl.Expr, ...] = (
    pl.col("rank"),
    pl.coalesce("device", pl.col("pid").cast(pl.Int32())).alias("device"),
    pl.coalesce("stream", "tid").alias("stream"),
    pl.col("start_ns"),
    (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
)
"""The key of a GPU activity (rank, device, stream, start, end) computed from event-table rows."""

OVERLAP_TOLERANCE_NS = 1_000
"""Same-stream overlaps up to this are clock rounding (Kineto's µs export), not a broken trace."""


@dataclass(frozen=True)
class GpuTimeline:
    """The GPU activities of some ranks and what was odd about them."""

    activities: pl.DataFrame
    """Frame in ``GPU_SCHEMA``, sorted by rank, start."""
    warnings: tuple[str, ...]


def gpu_activities(events: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    """The event-table rows of GPU work (kernels, copies, memsets), lazily."""
    return events.lazy().filter(pl.col("cat").is_in(GPU_CATEGORIES))


def _launches(events: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    return (
        events.lazy()
        .filter(pl.col("cat").is_in(LAUNCH_CATEGORIES) & pl.col("correlation").is_not_null())
        .group_by("rank", "correlation")
        .agg(
            pl.col("start_ns").min().alias("launch_ns"),
            (pl.col("start_ns") + pl.col("dur_ns")).max().alias("launch_end_ns"),
        )
    )


def _stream_overlaps(activities: pl.DataFrame) -> list[str]:
    """One warning per stream whose activities overlap the previous one by more than the tolerance.

    ``activities`` sorted by rank and start (as ``gpu_timeline`` orders them), so each stream's rows
    are in start order already: the window runs over them where they are, without a sort.
    """
    reach = pl.col("end_ns").cum_max().shift(1).over("rank", "device", "stream")
    overlaps = (
        activities.with_columns((reach - pl.col("start_ns")).alias("overlap_ns"))
        .filter(pl.col("overlap_ns") > OVERLAP_TOLERANCE_NS)
        .group_by("rank", "device", "stream")
        .agg(pl.len().alias("count"), pl.col("overlap_ns").max().alias("worst_ns"))
        .sort("rank", "device", "stream")
    )
    return [
        f"rank {row['rank']} GPU {row['device']} stream {row['stream']}: {row['count']} activities start "
        f"before the previous one on the same stream ends (worst {row['worst_ns'] / 1000:.1f} µs); one "
        "stream runs one thing at a time, so these times are suspect (their union is used, never their sum)"
        for row in overlaps.iter_rows(named=True)
    ]


def classified_activities(
    events: pl.DataFrame | pl.LazyFrame, patterns: tuple[KernelPattern, ...] = KERNEL_PATTERNS
) -> pl.DataFrame:
    """The GPU activities of ``events`` in trace order: their key (``STREAM_KEY_EXPRS``), ``cat``,
    ``name``, ``correlation`` and ``CLASS_SCHEMA`` columns, not yet tied to their launch."""
    raw = gpu_activities(events).select(*STREAM_KEY_EXPRS, "cat", "name", "correlation").collect()
    return classify(raw, patterns)


def gpu_timeline(
    events: pl.DataFrame | pl.LazyFrame,
    patterns: tuple[KernelPattern, ...] = KERNEL_PATTERNS,
    classified: pl.DataFrame | None = None,
) -> GpuTimeline:
    """Classified GPU activities of ``events`` (event-table rows) with their CPU launch times.

    ``classified``: ``classified_activities`` of the same events and patterns, when the caller has them.
    """
    if classified is None:
        classified = classified_activities(events, patterns)
    activities = (
        classified.lazy()
        .join(_launches(events), on=["rank", "correlation"], how="left")
        .select(list(GPU_SCHEMA))
        .sort("start_ns")
        .sort("rank", maintain_order=True)  # two single-key sorts: a third of one on both keys
        .collect()
    )
    warnings = _stream_overlaps(activities)
    unlaunched = activities.filter(pl.col("correlation").is_not_null() & pl.col("launch_ns").is_null())
    if not unlaunched.is_empty():
        warnings.append(
            f"ranks {sorted(unlaunched['rank'].unique().to_list())}: {unlaunched.height} GPU activities have "
            "a correlation id but no CPU launch event in the trace: no label is projected onto them"
        )
    suspects = suspect_compute(activities)
    if suspects:
        shown = "; ".join(name[:80] for name in suspects[:3])
        warnings.append(
            f"{len(suspects)} kernel names look like communication but no kernel-class row matches them, so "
            f"they count as compute: {shown}{' …' if len(suspects) > 3 else ''} (add a row: docs/gpu.md)"
        )
    return GpuTimeline(activities=activities, warnings=tuple(warnings))


PROJECTION_SCHEMA: dict[str, pl.DataType] = {
    "span_id": pl.UInt32(),
    "gpu_start_ns": pl.Int64(),
    "gpu_end_ns": pl.Int64(),
    "gpu_busy_ns": pl.Int64(),
    "kernels": pl.UInt32(),
    "compute_ns": pl.Int64(),
    "comm_ns": pl.Int64(),
    "launch_wait_ns": pl.Int64(),
    "launching_ns": pl.Int64(),
}
"""Per projected span: GPU extent (first start, last end), union of its work, count, and the union
of its compute and of its communication work, ns; ``launch_wait_ns``: the GPU idle inside the
extent, between the span's activities, before the launch call of the next one had returned (the
GPU waiting for its CPU to launch, ``launch_wait``); ``launching_ns``: how much of the extent
passed before the span's last launch call returned (its CPU still launching). Spans that launched
nothing are absent."""


def launch_wait(activities: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """Per ``key`` group: GPU idle between its activities while the next one's launch had not returned, ns.

    In each gap of the group's union (the GPU has nothing of it running), the part before the launch
    call of the activity that ends the gap returned is the GPU waiting on its CPU; the rest of the
    gap (the launch had returned, the work waited on a stream event or a queue) is not. Columns:
    ``key``, ``launch_wait_ns``.
    """
    reach = pl.col("end_ns").cum_max().shift(1).over(key)
    return (
        activities.sort([*key, "start_ns"])
        .with_columns(reach.alias("_reach"))
        .with_columns(
            (pl.min_horizontal("start_ns", "launch_end_ns") - pl.col("_reach"))
            .clip(lower_bound=0)
            .fill_null(0)
            .alias("_wait")
        )
        .group_by(key)
        .agg(pl.col("_wait").sum().cast(pl.Int64()).alias("launch_wait_ns"))
    )


def project_spans(spans: pl.DataFrame, activities: pl.DataFrame) -> pl.DataFrame:
    """GPU extent of the work launched inside each CPU span (``span_id``, ``rank``, ``start_ns``, ``end_ns``).

    An activity belongs to every span whose [start, end) holds its launch time; nested or paired
    spans therefore share work, which is what an unlabelled pair's two halves need.
    """
    launched = activities.filter(pl.col("launch_ns").is_not_null()).select(
        pl.col("rank").alias("_rank"), "launch_ns", "launch_end_ns", "start_ns", "end_ns", "kernel_class"
    )
    windows = spans.select(
        "span_id", "rank", pl.col("start_ns").alias("span_start"), pl.col("end_ns").alias("span_end")
    )
    # Rank by rank, so the join has only the two range conditions: polars answers those with a
    # range join whose output is the matches, where a rank condition beside them makes it pair
    # every span with every activity of its rank first (a gigabyte for a few thousand of each).
    by_rank = launched.partition_by("_rank", as_dict=True)
    pieces = [
        windows_of_rank.join_where(
            by_rank[(rank,)],
            pl.col("launch_ns") >= pl.col("span_start"),
            pl.col("launch_ns") < pl.col("span_end"),
        )
        for (rank,), windows_of_rank in windows.partition_by("rank", as_dict=True).items()
        if (rank,) in by_rank
    ]
    matched = pl.concat(pieces) if pieces else windows.join(launched, how="cross").clear()
    extent = matched.group_by("span_id").agg(
        pl.col("start_ns").min().alias("gpu_start_ns"),
        pl.col("end_ns").max().alias("gpu_end_ns"),
        pl.len().alias("kernels"),
        pl.col("launch_end_ns").max().alias("_last_launch_ns"),
    )
    busy = covered_ns(matched, ["span_id"]).rename({"covered_ns": "gpu_busy_ns"})
    classes = (("compute", "compute_ns"), ("communication", "comm_ns"))
    # One union grouped by class too, rather than a union per class.
    of_classes = matched.filter(pl.col("kernel_class").is_in([name for name, _ in classes]))
    per_class = covered_ns(of_classes, ["span_id", "kernel_class"])
    result = extent.join(busy, on="span_id", how="left").join(launch_wait(matched, ["span_id"]), on="span_id")
    for name, column in classes:
        part = per_class.filter(pl.col("kernel_class") == name)
        part = part.select("span_id", pl.col("covered_ns").alias(column))
        result = result.join(part, on="span_id", how="left")
    launching = (pl.min_horizontal("_last_launch_ns", "gpu_end_ns") - pl.col("gpu_start_ns")).clip(lower_bound=0)
    return (
        result.with_columns(pl.col("compute_ns", "comm_ns").fill_null(0), launching.alias("launching_ns"))
        .select(list(PROJECTION_SCHEMA))
        .cast(PROJECTION_SCHEMA)  # type: ignore[arg-type]
        .sort("span_id")
    )
