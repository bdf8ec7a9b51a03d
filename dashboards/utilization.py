"""The utilization view: each rank's bubble fraction, realized against the ideal replay.

Input, ``UTILIZATION_SCHEMA`` (one row per timeline and rank):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| timeline | String | ``realized`` or ``ideal`` | never null |
| rank | Int32 | global rank | never null |
| busy_ms | Float64 | union of the rank's compute spans, ms | never null |
| window_ms | Float64 | the window it is judged over (step window, or makespan), ms | never null |
| bubble_fraction | Float64 | (window - busy) / window | never null |

The definitions are those of ``tracekit.analysis.utilization``, for the realized run and its ideal
replay alike: the same window for every rank, an F&B pair counted once.
Up to ``bars_max_ranks`` ranks the view is grouped bars; beyond, two lines over the rank axis
(two marks however many ranks), so a slow band of ranks still stands out at 2048.

A straggler keeps busy (it is the rank the others wait for), so its bubble is the smallest: on
its own the view would make it look like the best rank. Given the stragglers (``STRAGGLER_INPUT``:
rank, saving_ms, the flagged rows of ``tracekit.stragglers.scoring.RANK_SCHEMA``), their realized
bars are outlined and labelled, and the subtitle says what their low bubble means.

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

STRAGGLER_INPUT: dict[str, pl.DataType] = {"rank": pl.Int32(), "saving_ms": pl.Float64()}

_NS_PER_MS = 1e6
_STRAGGLER_COLOR = "#D55E00"


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


def from_rank_utilization(per_rank: pl.DataFrame, timeline: str = "realized") -> pl.DataFrame:
    """Rows from ``rank_utilization`` rows (the run's, or its ideal replay's): the report's figures as they are."""
    return per_rank.select(
        pl.lit(timeline).alias("timeline"),
        "rank",
        (pl.col("busy_ns") / _NS_PER_MS).alias("busy_ms"),
        (pl.col("window_ns") / _NS_PER_MS).alias("window_ms"),
        "bubble_fraction",
    ).sort("rank")


def mean_bubble(frame: pl.DataFrame, timeline: str) -> float:
    """Mean bubble fraction over ranks of one timeline."""
    values = frame.filter(pl.col("timeline") == timeline)["bubble_fraction"]
    return float(values.mean())  # type: ignore[arg-type]


def utilization_chart(
    frame: pl.DataFrame, bars_max_ranks: int = 64, stragglers: pl.DataFrame | None = None
) -> alt.Chart | alt.LayerChart:
    """Bubble fraction per rank, realized against ideal: grouped bars, or lines for many ranks.

    ``stragglers`` (``STRAGGLER_INPUT``) marks the ranks ``tracekit stragglers`` names.
    """
    frame = check_columns(frame, UTILIZATION_SCHEMA, "utilization").with_columns(
        (1 - pl.col("bubble_fraction")).alias("utilization")
    )
    named = (
        check_columns(stragglers, STRAGGLER_INPUT, "stragglers")
        if stragglers is not None
        else pl.DataFrame(schema=STRAGGLER_INPUT)
    )
    frame = frame.join(named.rename({"saving_ms": "straggler_ms"}), on="rank", how="left")
    present = [timeline for timeline in TIMELINES if timeline in frame["timeline"].to_list()]
    subtitle = ["mean over ranks: " + ", ".join(f"{t} {mean_bubble(frame, t):.1%}" for t in present)]
    if named.height:
        ranks = ", ".join(str(rank) for rank in named["rank"].to_list())
        subtitle.append(
            f"outlined: straggler{'s' if named.height > 1 else ''} (rank {ranks}): a small bubble there is "
            "the rank's own slowness, the time the others wait for it, not good use"
        )
    title = alt.Title(
        "Bubble fraction per rank, realized against ideal", subtitle=subtitle[0] if len(subtitle) == 1 else subtitle
    )
    tooltip = [
        alt.Tooltip("timeline:N"),
        alt.Tooltip("rank:O"),
        alt.Tooltip("bubble_fraction:Q", format=".1%", title="bubble"),
        alt.Tooltip("utilization:Q", format=".1%"),
        alt.Tooltip("busy_ms:Q", format=".3f", title="busy (ms)"),
        alt.Tooltip("window_ms:Q", format=".3f", title="window (ms)"),
        alt.Tooltip("straggler_ms:Q", format=".1f", title="straggler: step ms it costs"),
    ]
    y = alt.Y("bubble_fraction:Q", title="bubble fraction (1 - utilization)", axis=alt.Axis(format="%"))
    base = alt.Chart(inline(frame)).properties(width=WIDTH, height=260)
    straggling = "isValid(datum.straggler_ms) && datum.timeline == 'realized'"
    if frame["rank"].n_unique() <= bars_max_ranks:
        x = alt.X("rank:O", title="rank")
        offset = alt.XOffset("timeline:N", sort=list(TIMELINES))
        bars = base.mark_bar().encode(x=x, xOffset=offset, y=y, color=timeline_color(), tooltip=tooltip)
        if not named.height:
            return bars.properties(title=title)
        outline = (
            base.mark_bar(fill=None, stroke=_STRAGGLER_COLOR, strokeWidth=2)
            .transform_filter(straggling)
            .encode(x=x, xOffset=offset, y=y, tooltip=tooltip)
        )
        label = (
            base.mark_text(dy=-8, color=_STRAGGLER_COLOR, fontWeight="bold")
            .transform_filter(straggling)
            .encode(x=x, xOffset=offset, y=y, text=alt.value("straggler"))
        )
        return (bars + outline + label).properties(title=title)
    lines = base.mark_line(interpolate="step-after", strokeWidth=1).encode(
        x=alt.X("rank:Q", title="rank"), y=y, color=timeline_color(), tooltip=tooltip
    )
    if not named.height:
        return lines.properties(title=title)
    points = (
        base.mark_point(shape="triangle-down", size=80, color=_STRAGGLER_COLOR, filled=True)
        .transform_filter(straggling)
        .encode(x=alt.X("rank:Q"), y=y, tooltip=tooltip)
    )
    return (lines + points).properties(title=title)
