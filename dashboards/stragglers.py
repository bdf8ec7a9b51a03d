"""The straggler views: a rank x action-kind heatmap of slowdown against the reference, and what-if attribution.

Heatmap input, ``SCORE_INPUT`` (``tracekit.stragglers.scoring.SCORE_SCHEMA`` columns plus
one row per rank and kind; ``heatmap_scores`` narrows a scoring result's ``scores`` to it):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| kind | String | action kind / compute op type | never null |
| reference | String | peers, expected or history | never null |
| median_ms | Float64 | the rank's median duration of the kind, ms | never null |
| reference_ms | Float64 | its reference duration, ms | history reference (not judged) |
| score | Float64 | reference_ms / median_ms (below 1: slower than the reference) | not judged |
| pattern | String | persistent, one-off or none | never null |
| flagged | Boolean | this cell is a straggler ``tracekit stragglers`` names: its rank's named kind | never null |

The cell colour is the slowdown, ``1 / score`` (own / reference): 1 is as fast as the reference, 1.5
is 50% slower; the legend reads in those multiples. Only slowness is coloured: a cell faster than
its reference stays pale. The outlined cells are exactly the stragglers of ``tracekit
stragglers`` (one per flagged rank, its named kind), not a threshold of the colour. Beyond
``max_rows`` (128) ranks, ranks are grouped into bands and a cell shows its band's worst rank, so
one straggler among thousands stays visible; a band is outlined when it holds a straggler.

Attribution input, ``ATTRIBUTION_INPUT`` (``tracekit.present.whatif.attribution_table``):
dimension (String: optype, dp_rank, stage, rank), group (String), slowdown (Float64: S with only
that group's real durations, the rest ideal). Each dimension gets its own bars, worst first, at
most ``top`` groups, with the run's overall slowdown S as a rule; a dimension with one group (one
data-parallel rank) is left out, its S being the overall S.

Not for: scoring or replay (``tracekit.stragglers``, ``tracekit.whatif``).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from dashboards.encoding import band_size, check_columns, inline, with_rank_band

SCORE_INPUT: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "kind": pl.String(),
    "reference": pl.String(),
    "median_ms": pl.Float64(),
    "reference_ms": pl.Float64(),
    "score": pl.Float64(),
    "pattern": pl.String(),
    "flagged": pl.Boolean(),
}

LEGEND_MULTIPLES = (0.25, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 4.0, 8.0, 16.0)
"""Slowdowns the colour legend labels (those inside the scale's domain)."""

ATTRIBUTION_INPUT: dict[str, pl.DataType] = {
    "dimension": pl.String(),
    "group": pl.String(),
    "slowdown": pl.Float64(),
}

DIMENSION_TITLES: dict[str, str] = {
    "optype": "op type",
    "dp_rank": "data-parallel rank",
    "stage": "pipeline stage",
    "rank": "rank (worker)",
}
"""Attribution dimensions in display order, with their axis titles."""


def heatmap_scores(scores: pl.DataFrame) -> pl.DataFrame:
    """``SCORE_INPUT`` from a scoring result's ``scores`` (``flagged``: the kind a straggler is named by)."""
    return scores.select(list(SCORE_INPUT))


def slowdown_cells(scores: pl.DataFrame, max_rows: int) -> pl.DataFrame:
    """One cell per (rank band, kind): the band's worst slowdown and which rank has it.

    Columns: band, ranks, kind, worst_rank, slowdown (null: not judged), median_ms, reference_ms,
    reference, pattern, flagged (a straggler in the band, on this kind).
    """
    scores = check_columns(scores, SCORE_INPUT, "stragglers")
    size = band_size(int(scores["rank"].max()) + 1, max_rows)  # type: ignore[arg-type]
    banded = with_rank_band(scores, size).with_columns((1 / pl.col("score")).alias("slowdown"))
    flagged = banded.group_by("band", "kind").agg(pl.col("flagged").any())
    return (
        banded.sort(["flagged", "slowdown"], descending=True, nulls_last=True)
        .group_by("band", "ranks", "kind", maintain_order=True)
        .first()
        .drop("flagged")
        .join(flagged, on=["band", "kind"])
        .select(
            "band",
            "ranks",
            "kind",
            pl.col("rank").alias("worst_rank"),
            "slowdown",
            "median_ms",
            "reference_ms",
            "reference",
            "pattern",
            "flagged",
        )
        .sort("band", "kind")
    )


def straggler_heatmap(scores: pl.DataFrame, threshold: float, max_rows: int = 128) -> alt.Chart:
    """Rank (band) x kind, coloured by slowdown against the reference; the stragglers' cells outlined."""
    cells = slowdown_cells(scores, max_rows)
    bands = cells["band"].n_unique()
    measured = cells["slowdown"].drop_nulls()
    # Colour is for what is wrong: from 1 (as fast as the reference) up to the slowest cell. A cell
    # faster than its reference (a straggler's healthy peer, judged against the straggler) is not
    # wrong, so it stays as pale as a typical one; its tooltip still gives its figure.
    top = 1 / threshold
    if measured.len():
        top = max(top, float(measured.max()))  # type: ignore[arg-type]
    grouped = cells["ranks"].str.contains("-").any()
    title = alt.Title(
        "Slowdown against the reference per rank and action kind",
        subtitle="own median / reference (peers, else the expected cost of its work); the darker, the slower; "
        "as fast or faster than the reference: pale; outlined: the stragglers "
        f"tracekit stragglers names (score < {threshold}, persistent, costly); grey: not judged"
        + ("; each row is a band of ranks showing its worst rank" if grouped else ""),
    )
    base = alt.Chart(inline(cells), title=title).encode(
        x=alt.X("kind:N", title="action kind"),
        y=alt.Y(
            "band:O", title="ranks (first of band)" if grouped else "rank", axis=alt.Axis(labelOverlap=True)
        ),
    )
    shown = [value for value in LEGEND_MULTIPLES if 1 <= value <= top]
    heat = base.mark_rect().encode(
        color=alt.Color(
            "slowdown:Q",
            # Log scale from 1 (as fast as the reference): 2x and 4x slower sit equally far apart;
            # faster cells are clamped to the pale end.
            scale=alt.Scale(type="log", scheme="oranges", domain=[1.0, top], clamp=True),
            title="own / reference (×)",
            legend=alt.Legend(values=shown, labelExpr="'×' + format(datum.value, '.3~g')"),
        ),
        tooltip=[
            alt.Tooltip("ranks:N"),
            alt.Tooltip("worst_rank:O", title="worst rank"),
            alt.Tooltip("kind:N"),
            alt.Tooltip("slowdown:Q", format=".2f", title="own / reference"),
            alt.Tooltip("median_ms:Q", format=".3f", title="median (ms)"),
            alt.Tooltip("reference_ms:Q", format=".3f", title="reference (ms)"),
            alt.Tooltip("reference:N"),
            alt.Tooltip("pattern:N"),
            alt.Tooltip("flagged:N", title="straggler"),
        ],
    )
    # Cells not judged (null slowdown) would be dropped by the log scale: drawn grey instead.
    unjudged = (
        base.mark_rect(color="#d9d9d9")
        .transform_filter("!isValid(datum.slowdown)")
        .encode(
            tooltip=[
                alt.Tooltip("ranks:N"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("median_ms:Q", format=".3f", title="median (ms)"),
                alt.Tooltip("reference:N"),
            ]
        )
    )
    outline = base.mark_rect(fill=None, stroke="black", strokeWidth=2 if bands <= 32 else 1).transform_filter(
        alt.datum.flagged
    )
    return (unjudged + heat + outline).properties(
        width=max(60 * cells["kind"].n_unique(), 240), height=min(max(14 * bands, 80), 520)
    )


def attribution_chart(attribution: pl.DataFrame, overall: float, top: int = 20) -> alt.HConcatChart:
    """Bars of S per group for each dimension, worst first (at most ``top``), with the overall S as a rule."""
    attribution = check_columns(attribution, ATTRIBUTION_INPUT, "attribution")
    charts = []
    for dimension, axis_title in DIMENSION_TITLES.items():
        rows = attribution.filter(pl.col("dimension") == dimension).sort("slowdown", descending=True)
        if rows.height < 2:
            continue  # one group's S is the overall S: nothing to compare
        shown = rows.head(top)
        title = f"by {axis_title}" + (f" (worst {top} of {rows.height})" if rows.height > top else "")
        bars = (
            alt.Chart(inline(shown))
            .mark_bar(color="#0072B2")
            .encode(
                x=alt.X("slowdown:Q", title="S with only this group real", scale=alt.Scale(zero=False)),
                x2=alt.datum(1.0),  # bars grow from 1 (ideal), left when a group is faster than its ideal
                y=alt.Y("group:N", sort="-x", title=axis_title),
                tooltip=[alt.Tooltip("group:N"), alt.Tooltip("slowdown:Q", format=".3f", title="S_G")],
            )
        )
        rule = (
            alt.Chart(inline(pl.DataFrame({"overall": [overall]})))
            .mark_rule(color="#D55E00", strokeDash=[4, 3], strokeWidth=2)
            .encode(x="overall:Q", tooltip=[alt.Tooltip("overall:Q", format=".3f", title="overall S")])
        )
        charts.append(
            (bars + rule).properties(title=title, width=220, height=min(18 * shown.height + 20, 380))
        )
    assert charts, "attribution has no dimension with two groups or more"
    return alt.hconcat(*charts).properties(
        title=alt.Title(
            "What-if attribution: slowdown S with only one group's real durations",
            subtitle=f"dashed: the run's overall S = {overall:.3f} (1 = every op at its ideal duration)",
        )
    )
