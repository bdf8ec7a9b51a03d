"""The rank views: where to look among thousands of ranks, then any one rank's timeline.

Aggregates first, each at a size a browser draws at 2,048 ranks:

- ``step_heatmap``: bubble fraction per rank band and step (``tracekit.analysis.utilization``'s
  per-step rows, ``STEP_INPUT``); a cell shows its band's mean and names its worst rank;
- ``bubble_histogram``: how the ranks' whole-run bubble fractions are distributed (``RANK_INPUT``);
- ``costliest_timelines``: the Gantt chart of the ``k`` ranks whose slowness costs the step the
  most (``tracekit stragglers``' ``saving_ms``), one step;
- ``rank_picker``: any rank's timeline of one step, chosen in the page (a number field bound to
  a vega-lite parameter). Each rank's actions travel as one row of parallel arrays, so the page
  carries every rank's step in a few bytes per action and the browser expands only the chosen one;
- ``critical_path_chart``: the chain of actions that sets the replayed step time
  (``tracekit.whatif.critical.CRITICAL_SCHEMA``), rank by rank.

Not for: computing any of these figures (``tracekit.run_analysis``), or the whole-run timeline
(``dashboards.timeline``).
"""

from __future__ import annotations

import altair as alt
import orjson
import polars as pl

from dashboards.encoding import WIDTH, band_size, check_columns, inline, kind_color, with_rank_band
from dashboards.timeline import TIMELINE_SCHEMA, gantt_marks

STEP_INPUT: dict[str, pl.DataType] = {"rank": pl.Int32(), "step": pl.Int32(), "bubble_fraction": pl.Float64()}
RANK_INPUT: dict[str, pl.DataType] = {"rank": pl.Int32(), "bubble_fraction": pl.Float64()}

PICKER_MAX_BYTES = 4_000_000
"""Most bytes the any-rank view embeds (every rank's actions of one step as parallel arrays)."""

_DECIMALS = 3
"""Times in the any-rank arrays are rounded to 1 us: a few bytes per number."""


def step_heatmap(per_step: pl.DataFrame, max_rows: int = 128) -> alt.Chart:
    """Rank band x step, coloured by mean bubble fraction; the tooltip names each band's worst rank."""
    per_step = check_columns(per_step, STEP_INPUT, "rank x step")
    size = band_size(int(per_step["rank"].max()) + 1, max_rows)  # type: ignore[arg-type]
    cells = (
        with_rank_band(per_step, size)
        .sort("bubble_fraction", descending=True)
        .group_by("band", "ranks", "step", maintain_order=True)
        .agg(
            pl.col("bubble_fraction").mean().alias("mean_bubble"),
            pl.col("rank").first().alias("worst_rank"),
            pl.col("bubble_fraction").first().alias("worst_bubble"),
        )
        .sort("band", "step")
    )
    grouped = size > 1
    return (
        alt.Chart(
            inline(cells),
            title=alt.Title(
                "Bubble fraction per rank and step",
                subtitle="(step window - busy) / step window, as tracekit report"
                + (
                    f"; each row is a band of {size} ranks: its mean, its worst rank in the tooltip"
                    if grouped
                    else ""
                ),
            ),
        )
        .mark_rect()
        .encode(
            x=alt.X("step:O", title="step"),
            y=alt.Y(
                "band:O",
                title="ranks (first of band)" if grouped else "rank",
                axis=alt.Axis(labelOverlap=True),
            ),
            color=alt.Color(
                "mean_bubble:Q", scale=alt.Scale(domain=[0, 1], scheme="magma", reverse=True), title="bubble"
            ),
            tooltip=[
                alt.Tooltip("ranks:N"),
                alt.Tooltip("step:O"),
                alt.Tooltip("mean_bubble:Q", format=".1%", title="mean bubble"),
                alt.Tooltip("worst_rank:O", title="worst rank"),
                alt.Tooltip("worst_bubble:Q", format=".1%", title="its bubble"),
            ],
        )
        .properties(
            width=max(40 * cells["step"].n_unique(), 240),
            height=min(max(14 * cells["band"].n_unique(), 80), 520),
        )
    )


def bubble_histogram(per_rank: pl.DataFrame, bins: int = 40) -> alt.Chart:
    """How many ranks have each whole-run bubble fraction."""
    per_rank = check_columns(per_rank, RANK_INPUT, "bubble distribution")
    return (
        alt.Chart(
            inline(per_rank),
            title=alt.Title(
                f"Bubble fraction over all steps: distribution over {per_rank.height} ranks",
                subtitle="a tail to the right is ranks that wait; a straggler itself sits at the left (it keeps busy)",
            ),
        )
        .mark_bar(color="#0072B2")
        .encode(
            x=alt.X(
                "bubble_fraction:Q",
                bin=alt.Bin(maxbins=bins),
                title="bubble fraction",
                axis=alt.Axis(format="%"),
            ),
            y=alt.Y("count():Q", title="ranks"),
            tooltip=[alt.Tooltip("count():Q", title="ranks")],
        )
        .properties(width=WIDTH // 2, height=220)
    )


def costliest_timelines(frame: pl.DataFrame, ranks: list[int], title: str) -> alt.Chart:
    """Gantt chart of the realized actions (``TIMELINE_SCHEMA``) of ``ranks``, in their given order."""
    marks = gantt_marks(frame.filter(pl.col("rank").is_in(ranks) & (pl.col("timeline") == "realized")))
    return (
        alt.Chart(inline(marks.drop("timeline")), title=title)
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("start_ms:Q", title="time (ms)"),
            x2="end_ms:Q",
            y=alt.Y("rank:O", sort=ranks, title="rank"),
            color=kind_color(),
            tooltip=[
                alt.Tooltip("rank:O"),
                alt.Tooltip("action:N"),
                alt.Tooltip("start_ms:Q", format=".3f", title="start (ms)"),
                alt.Tooltip("dur_ms:Q", format=".3f", title="duration (ms)"),
            ],
        )
        .properties(width=WIDTH, height=22 * len(ranks) + 20)
    )


def picker_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per rank of the realized timeline: parallel arrays ``a`` (action), ``k`` (kind), ``s``, ``e`` (ms)."""
    marks = gantt_marks(frame.filter(pl.col("timeline") == "realized"))
    return (
        marks.with_columns(pl.col("start_ms", "end_ms").round(_DECIMALS))
        .group_by("rank", maintain_order=True)
        .agg(
            pl.col("action").alias("a"),
            pl.col("kind").alias("k"),
            pl.col("start_ms").alias("s"),
            pl.col("end_ms").alias("e"),
        )
        .sort("rank")
    )


def rank_picker(frame: pl.DataFrame, first_rank: int, title: str) -> alt.Chart:
    """Any rank's realized timeline (``TIMELINE_SCHEMA``), the rank chosen in the page; ``first_rank`` shown first."""
    frame = check_columns(frame, TIMELINE_SCHEMA, "any rank")
    rows = picker_rows(frame)
    data = {"values": rows.to_dicts()}
    size = len(orjson.dumps(data))
    assert size <= PICKER_MAX_BYTES, f"the any-rank view embeds about {size} bytes (cap {PICKER_MAX_BYTES})"
    ranks = rows["rank"]
    chosen = alt.param(
        name="picked_rank",
        value=first_rank,
        bind=alt.binding(input="number", name=f"rank ({int(ranks.min())}-{int(ranks.max())}) "),  # type: ignore[arg-type]
    )
    return (
        alt.Chart(data, title=title)
        .add_params(chosen)
        # The page's field hands the parameter its text: compared as a number.
        .transform_filter("datum.rank === toNumber(picked_rank)")
        .transform_flatten(["a", "k", "s", "e"])
        .transform_calculate(d="datum.e - datum.s")
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("s:Q", title="time (ms)"),
            x2="e:Q",
            y=alt.Y("rank:O", title="rank"),
            color=kind_color("k"),
            tooltip=[
                alt.Tooltip("rank:O"),
                alt.Tooltip("a:N", title="action"),
                alt.Tooltip("s:Q", format=".3f", title="start (ms)"),
                alt.Tooltip("d:Q", format=".3f", title="duration (ms)"),
            ],
        )
        .properties(width=WIDTH, height=60)
    )


def critical_path_chart(path: pl.DataFrame, title: str) -> alt.Chart:
    """The critical path of one step (``CRITICAL_SCHEMA`` rows): its actions on their ranks, in replayed time."""
    rows = path.select(
        "position",
        "rank",
        "stage",
        pl.col("optype").alias("kind"),
        "start_ms",
        "end_ms",
        "via",
        (pl.col("end_ms") - pl.col("start_ms")).alias("dur_ms"),
    )
    ranks = rows["rank"].unique(maintain_order=True).to_list()
    return (
        alt.Chart(inline(rows), title=title)
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("start_ms:Q", title="replayed time (ms)"),
            x2="end_ms:Q",
            y=alt.Y("rank:O", sort=ranks, title="rank"),
            color=kind_color(),
            tooltip=[
                alt.Tooltip("position:O", title="place on path"),
                alt.Tooltip("rank:O"),
                alt.Tooltip("stage:O"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("via:N", title="waited for"),
                alt.Tooltip("start_ms:Q", format=".3f", title="start (ms)"),
                alt.Tooltip("dur_ms:Q", format=".3f", title="duration (ms)"),
            ],
        )
        .properties(width=WIDTH, height=min(max(18 * len(ranks), 60), 520))
    )
