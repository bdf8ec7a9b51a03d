"""The timeline view: the realized schedule above its ideal replay, one row per rank, same time axis.

Input, ``TIMELINE_SCHEMA`` (one row per action; the realized and the ideal timeline stacked):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| timeline | String | ``realized`` or ``ideal`` | never null |
| rank | Int32 | global rank | never null |
| stage | Int32 | pipeline stage | never null |
| kind | String | F, B, I, W | never null |
| microbatch | Int32 | micro-batch index | never null |
| start_ms | Float64 | start, ms from the start of what is shown (each timeline from its own 0) | never null |
| end_ms | Float64 | end, ms | never null |
| overlapped | Boolean | True for the two halves of an overlapped F&B pair | never null |

Up to ``TimelineLimits.gantt_max_ranks`` ranks the view is a Gantt chart (one bar per action, an
F&B pair as one bar coloured F&B, micro-batch in the tooltip). Beyond that, or when the bars would
exceed the row cap, it is a heatmap of busy fraction per rank band and time bin, ranks ordered by
pipeline stage so that data-parallel replicas share a band: the same story (fill, steady state,
drain, stalls) at a size a browser draws at thousands of ranks.

Not for: computing the ideal timeline (``tracekit.run_analysis.RunAnalysis.ideal_timeline``).
"""

from __future__ import annotations

from dataclasses import dataclass

import altair as alt
import polars as pl

from dashboards.encoding import (
    MAX_ROWS,
    TIMELINES,
    WIDTH,
    band_size,
    check_columns,
    inline,
    kind_color,
)
from tracekit.run_analysis import covered_bins

TIMELINE_SCHEMA: dict[str, pl.DataType] = {
    "timeline": pl.String(),
    "rank": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "microbatch": pl.Int32(),
    "start_ms": pl.Float64(),
    "end_ms": pl.Float64(),
    "overlapped": pl.Boolean(),
}

_KIND_RANK = {"F": 0, "B": 1, "I": 2, "W": 3}
_NS_PER_MS = 1e6


@dataclass(frozen=True)
class TimelineLimits:
    """When the timeline stops drawing one bar per action."""

    gantt_max_ranks: int = 64
    """Most ranks drawn as a Gantt chart; more become a heatmap."""
    label_max_ranks: int = 16
    """Most ranks whose bars also print their micro-batch number."""
    heatmap_bins: int = 120
    """Time bins of the heatmap."""
    heatmap_max_bands: int = 128
    """Most heatmap rows; ranks are grouped into equal bands beyond it."""

    def __post_init__(self) -> None:
        assert min(self.gantt_max_ranks, self.heatmap_bins, self.heatmap_max_bands) > 0
        assert 2 * self.heatmap_bins * self.heatmap_max_bands <= MAX_ROWS


def from_realized(actions: pl.DataFrame, origin_ns: int, timeline: str = "realized") -> pl.DataFrame:
    """Realized actions (``REALIZED_SCHEMA``: the run's, or its ideal replay's) as a timeline, from ``origin_ns``."""
    return actions.select(
        pl.lit(timeline).alias("timeline"),
        "rank",
        "stage",
        "kind",
        "microbatch",
        ((pl.col("start_ns") - origin_ns) / _NS_PER_MS).alias("start_ms"),
        ((pl.col("end_ns") - origin_ns) / _NS_PER_MS).alias("end_ms"),
        "overlapped",
    )


def _label() -> pl.Expr:
    return pl.concat_str(pl.col("stage").cast(pl.String()), "kind", pl.col("microbatch").cast(pl.String()))


def gantt_marks(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per bar: single actions as they are, each overlapped pair's halves merged into an F&B bar.

    The halves of a pair are consecutive among a rank's overlapped actions in start order (the
    convention of ``tracekit.schedule.realized``). Columns: timeline, rank, kind, action (``2F0``
    or ``0F3 & 7B1``), microbatch (String, ``3`` or ``3 & 1``), start_ms, end_ms, dur_ms.
    """
    frame = check_columns(frame, TIMELINE_SCHEMA, "timeline")
    ordered = frame.sort(
        "timeline", "rank", "start_ms", pl.col("kind").replace_strict(_KIND_RANK, return_dtype=pl.Int8())
    ).with_columns(_label().alias("action"), pl.col("microbatch").cast(pl.String()))
    columns = ["timeline", "rank", "kind", "action", "microbatch", "start_ms", "end_ms"]
    single = ordered.filter(~pl.col("overlapped")).select(columns)
    pairs = (
        ordered.filter(pl.col("overlapped"))
        .with_columns((pl.int_range(pl.len()).over("timeline", "rank") // 2).alias("pair"))
        .group_by("timeline", "rank", "pair", maintain_order=True)
        .agg(
            pl.col("action").str.join(" & "),
            pl.col("microbatch").str.join(" & "),
            pl.col("start_ms").min(),
            pl.col("end_ms").max(),
        )
        .with_columns(pl.lit("F&B").alias("kind"))
        .select(columns)
    )
    return (
        pl.concat([single, pairs])
        .sort("timeline", "rank", "start_ms")
        .with_columns((pl.col("end_ms") - pl.col("start_ms")).alias("dur_ms"))
    )


def rank_bands(frame: pl.DataFrame, max_bands: int) -> pl.DataFrame:
    """Rank -> band: ranks ordered by first stage, then rank, cut into at most ``max_bands`` equal bands.

    Ordering by stage first puts the data-parallel replicas of one pipeline stage in one band, so
    a heatmap of thousands of ranks still shows the pipeline's fill and drain. Columns: rank, band
    (0, 1, ...), ranks (the band in words: ``stage 2: ranks 2-2042 (16)``, or ``rank 5 (stage 1)``).
    """
    order = (
        frame.group_by("rank")
        .agg(pl.col("stage").min().alias("first_stage"))
        .sort("first_stage", "rank")
        .with_row_index("row")
    )
    size = band_size(order.height, max_bands)
    order = order.with_columns((pl.col("row") // size).cast(pl.Int32()).alias("band"))
    stages = pl.col("first_stage").min().cast(pl.String())
    stages = (
        pl.when(pl.col("first_stage").min() == pl.col("first_stage").max())
        .then(stages)
        .otherwise(pl.concat_str(stages, pl.lit("-"), pl.col("first_stage").max().cast(pl.String())))
    )
    labels = order.group_by("band").agg(
        pl.when(pl.len() == 1)
        .then(pl.format("rank {} (stage {})", pl.col("rank").min(), stages))
        .otherwise(
            pl.format(
                "stage {}: ranks {}-{} ({})", stages, pl.col("rank").min(), pl.col("rank").max(), pl.len()
            )
        )
        .alias("ranks")
    )
    return order.join(labels, on="band").select("rank", "band", "ranks").sort("band", "rank")


def activity_cells(frame: pl.DataFrame, limits: TimelineLimits) -> pl.DataFrame:
    """Busy fraction per (timeline, rank band, time bin): the union of the band's actions over its capacity.

    Bands are ``rank_bands``. Columns: timeline, band, ranks, t0_ms, t1_ms, busy (0..1). Every cell
    of the grid of the timelines present is there; an idle one has busy 0.
    """
    frame = check_columns(frame, TIMELINE_SCHEMA, "timeline")
    bands = rank_bands(frame, limits.heatmap_max_bands)
    span = float(frame["end_ms"].max())  # type: ignore[arg-type]
    width = span / limits.heatmap_bins
    covered = covered_bins(
        frame.select(
            "timeline", "rank", pl.col("start_ms").alias("start_ns"), pl.col("end_ms").alias("end_ns")
        ),
        ["timeline", "rank"],
        width,
        limits.heatmap_bins,
    )
    busy = (
        covered.join(bands.select("rank", "band"), on="rank")
        .group_by("timeline", "band", "bin")
        .agg(pl.col("covered").sum())
    )
    sizes = bands.group_by("band", "ranks").agg(pl.len().alias("band_ranks"))
    present = [timeline for timeline in TIMELINES if timeline in frame["timeline"].to_list()]
    grid = (
        pl.DataFrame({"timeline": present})
        .join(sizes, how="cross")
        .join(pl.DataFrame({"bin": range(limits.heatmap_bins)}, schema={"bin": pl.Int32()}), how="cross")
    )
    return (
        grid.join(busy, on=["timeline", "band", "bin"], how="left")
        .with_columns(
            (pl.col("bin") * width).alias("t0_ms"),
            ((pl.col("bin") + 1) * width).alias("t1_ms"),
            (pl.col("covered").fill_null(0.0) / (width * pl.col("band_ranks"))).clip(0.0, 1.0).alias("busy"),
        )
        .select("timeline", "band", "ranks", "t0_ms", "t1_ms", "busy")
        .sort("timeline", "band", "t0_ms")
    )


_ROW = alt.Row("timeline:N", sort=list(TIMELINES), title=None, header=alt.Header(labelFontSize=13))
"""Realized above ideal, each on its own time axis: the ideal step is often a fraction of the realized one."""


def gantt_chart(frame: pl.DataFrame, title: str, limits: TimelineLimits) -> alt.FacetChart:
    """Realized over ideal Gantt: one row per rank, colour by kind, action and micro-batch in the tooltip."""
    marks = gantt_marks(frame)
    num_ranks = marks["rank"].n_unique()
    x = alt.X("start_ms:Q", title="time (ms)")
    y = alt.Y("rank:O", title="rank")
    bars = (
        alt.Chart()
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=x,
            x2="end_ms:Q",
            y=y,
            color=kind_color(),
            tooltip=[
                alt.Tooltip("timeline:N"),
                alt.Tooltip("rank:O"),
                alt.Tooltip("action:N"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("microbatch:N", title="micro-batch"),
                alt.Tooltip("start_ms:Q", format=".3f", title="start (ms)"),
                alt.Tooltip("dur_ms:Q", format=".3f", title="duration (ms)"),
            ],
        )
    )
    layers: list[alt.Chart] = [bars]
    if num_ranks <= limits.label_max_ranks:
        # Only bars wide enough for their text (about 1/40 of their own timeline's axis) carry a
        # label; the others get an empty one, so no row's text layer is left without data.
        layers.append(
            alt.Chart()
            .mark_text(fontSize=9, color="white", baseline="middle")
            .transform_joinaggregate(axis_ms="max(end_ms)", groupby=["timeline"])
            .transform_calculate(
                mid_ms="(datum.start_ms + datum.end_ms) / 2",
                label="datum.dur_ms >= datum.axis_ms / 40 ? '' + datum.microbatch : ''",
            )
            .encode(x="mid_ms:Q", y=y, text="label:N")
        )
    return (
        alt.layer(*layers)
        .properties(width=WIDTH, height=min(max(22 * num_ranks, 100), 640))
        .facet(row=_ROW, data=inline(marks))
        .resolve_scale(x="independent")
        .properties(title=title)
    )


def heatmap_chart(frame: pl.DataFrame, title: str, limits: TimelineLimits) -> alt.FacetChart:
    """Realized over ideal busy-fraction heatmap: rank bands by time bins."""
    cells = activity_cells(frame, limits)
    bands = cells["band"].n_unique()
    chart = (
        alt.Chart()
        .mark_rect()
        .encode(
            x=alt.X("t0_ms:Q", title="time (ms)"),
            x2="t1_ms:Q",
            y=alt.Y(
                "ranks:N",
                sort=alt.EncodingSortField(field="band", op="min"),
                title="ranks, by pipeline stage",
                axis=alt.Axis(labelOverlap=True, labelLimit=220),
            ),
            color=alt.Color(
                "busy:Q", scale=alt.Scale(domain=[0, 1], scheme="viridis"), title="busy fraction"
            ),
            tooltip=[
                alt.Tooltip("timeline:N"),
                alt.Tooltip("ranks:N"),
                alt.Tooltip("t0_ms:Q", format=".3f", title="from (ms)"),
                alt.Tooltip("t1_ms:Q", format=".3f", title="to (ms)"),
                alt.Tooltip("busy:Q", format=".0%", title="busy"),
            ],
        )
        .properties(width=WIDTH, height=min(max(4 * bands, 120), 512))
    )
    return chart.facet(row=_ROW, data=inline(cells)).resolve_scale(x="independent").properties(title=title)


def timeline_chart(frame: pl.DataFrame, title: str, limits: TimelineLimits | None = None) -> alt.FacetChart:
    """The Gantt chart when it stays readable and under the row cap, else the heatmap."""
    limits = limits or TimelineLimits()
    num_ranks = frame["rank"].n_unique()
    if num_ranks <= limits.gantt_max_ranks and frame.height <= MAX_ROWS:
        return gantt_chart(frame, title, limits)
    return heatmap_chart(
        frame, f"{title} (busy fraction per rank band and time bin: {num_ranks} ranks)", limits
    )
