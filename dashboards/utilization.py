"""The utilization view: each rank's bubble fraction, realized against the ideal replay.

Input, ``UTILIZATION_SCHEMA`` (one row per timeline and rank):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| timeline | String | ``realized`` or ``ideal`` | never null |
| rank | Int32 | global rank | never null |
| busy_ms | Float64 | union of the rank's compute spans, ms | never null |
| window_ms | Float64 | the window it is judged over (step window, or makespan), ms | never null |
| bubble_fraction | Float64 | (window - busy) / window | never null |

The definitions are those of ``tracekit.analysis.utilization`` (realized) and
``tracekit.schedule.metrics`` (ideal): the same window for every rank, an F&B pair counted once.
Up to ``bars_max_ranks`` ranks the view is grouped bars; beyond, two lines over the rank axis
(two marks however many ranks), so a slow band of ranks still stands out at 2048.

Not for: computing utilization (``tracekit.analysis.utilization``).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from dashboards.encoding import TIMELINES, WIDTH, check_columns, inline, timeline_color

UTILIZATION_SCHEMA: dict[str, pl.DataType] = {
    "timeline": pl.String(),
    "rank": pl.Int32(),
    "busy_ms": pl.Float64(),
    "window_ms": pl.Float64(),
    "bubble_fraction": pl.Float64(),
}

_NS_PER_MS = 1e6


def from_step_utilization(per_step: pl.DataFrame) -> pl.DataFrame:
    """Realized rows from ``step_utilization`` rows (already filtered to the steps shown), summed per rank."""
    return (
        per_step.group_by("rank")
        .agg(
            (pl.col("busy_ns").sum() / _NS_PER_MS).alias("busy_ms"),
            (pl.col("window_ns").sum() / _NS_PER_MS).alias("window_ms"),
        )
        .select(
            pl.lit("realized").alias("timeline"),
            "rank",
            "busy_ms",
            "window_ms",
            (1 - pl.col("busy_ms") / pl.col("window_ms")).alias("bubble_fraction"),
        )
        .sort("rank")
    )


def from_simulated_ranks(ranks: pl.DataFrame) -> pl.DataFrame:
    """Ideal rows from ``tracekit.schedule.metrics.RANK_SCHEMA`` rows (times in ms)."""
    return ranks.select(
        pl.lit("ideal").alias("timeline"),
        "rank",
        pl.col("busy").alias("busy_ms"),
        (pl.col("busy") + pl.col("idle")).alias("window_ms"),
        "bubble_fraction",
    )


def mean_bubble(frame: pl.DataFrame, timeline: str) -> float:
    """Mean bubble fraction over ranks of one timeline."""
    values = frame.filter(pl.col("timeline") == timeline)["bubble_fraction"]
    return float(values.mean())  # type: ignore[arg-type]


def utilization_chart(frame: pl.DataFrame, bars_max_ranks: int = 64) -> alt.Chart:
    """Bubble fraction per rank, realized against ideal: grouped bars, or lines for many ranks."""
    frame = check_columns(frame, UTILIZATION_SCHEMA, "utilization").with_columns(
        (1 - pl.col("bubble_fraction")).alias("utilization")
    )
    present = [timeline for timeline in TIMELINES if timeline in frame["timeline"].to_list()]
    title = alt.Title(
        "Bubble fraction per rank, realized against ideal",
        subtitle="mean over ranks: " + ", ".join(f"{t} {mean_bubble(frame, t):.1%}" for t in present),
    )
    tooltip = [
        alt.Tooltip("timeline:N"),
        alt.Tooltip("rank:O"),
        alt.Tooltip("bubble_fraction:Q", format=".1%", title="bubble"),
        alt.Tooltip("utilization:Q", format=".1%"),
        alt.Tooltip("busy_ms:Q", format=".3f", title="busy (ms)"),
        alt.Tooltip("window_ms:Q", format=".3f", title="window (ms)"),
    ]
    y = alt.Y("bubble_fraction:Q", title="bubble fraction (1 - utilization)", axis=alt.Axis(format="%"))
    base = alt.Chart(inline(frame), title=title).properties(width=WIDTH, height=260)
    if frame["rank"].n_unique() <= bars_max_ranks:
        return base.mark_bar().encode(
            x=alt.X("rank:O", title="rank"),
            xOffset=alt.XOffset("timeline:N", sort=list(TIMELINES)),
            y=y,
            color=timeline_color(),
            tooltip=tooltip,
        )
    return base.mark_line(interpolate="step-after", strokeWidth=1).encode(
        x=alt.X("rank:Q", title="rank"), y=y, color=timeline_color(), tooltip=tooltip
    )
