"""The overlap view: how much of each rank's communication, per class, hides under its compute.

Input, ``OVERLAP_INPUT`` (one row per rank and communication class of a GPU trace):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| comm_class | String | communication class (``tracekit.gpu.kernel_classes.COMM_CLASSES``) | never null |
| comm_ms | Float64 | union of the class's communication kernels on the rank, ms | never null |
| overlapped_ms | Float64 | the part of it that runs while a compute kernel runs, ms | never null |

A ``comm_class`` of ``all`` (``tracekit.gpu.overlap.ALL_COMM``: every communication kernel
together) is drawn as the heatmap's first column and left out of the per-class totals.

Left, a heatmap of rank (band) x class coloured by ``overlapped_ms / comm_ms``; beyond
``max_rows`` (128) ranks, ranks are grouped into bands whose figures add up (the band's fraction is
of its summed times). Right, per class over all ranks, the hidden and the exposed time stacked.

Not for: classifying kernels or intersecting spans (``tracekit.gpu``).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from dashboards.encoding import band_size, check_columns, inline, with_rank_band
from tracekit.gpu.overlap import ALL_COMM

OVERLAP_INPUT: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "comm_class": pl.String(),
    "comm_ms": pl.Float64(),
    "overlapped_ms": pl.Float64(),
}


_NS_PER_MS = 1e6


def from_gpu_overlap(overlap: pl.DataFrame) -> pl.DataFrame:
    """``OVERLAP_INPUT`` rows from ``tracekit.gpu.overlap.OVERLAP_SCHEMA`` rows (ns to ms)."""
    return overlap.select(
        "rank",
        "comm_class",
        (pl.col("comm_ns") / _NS_PER_MS).alias("comm_ms"),
        (pl.col("overlap_ns") / _NS_PER_MS).alias("overlapped_ms"),
    )


def overlap_cells(overlap: pl.DataFrame, max_rows: int) -> pl.DataFrame:
    """Per (rank band, class): comm_ms, overlapped_ms, exposed_ms summed, and overlap_fraction."""
    overlap = check_columns(overlap, OVERLAP_INPUT, "overlap")
    size = band_size(int(overlap["rank"].max()) + 1, max_rows)  # type: ignore[arg-type]
    return (
        with_rank_band(overlap, size)
        .group_by("band", "ranks", "comm_class")
        .agg(pl.col("comm_ms").sum(), pl.col("overlapped_ms").sum())
        .with_columns(
            (pl.col("comm_ms") - pl.col("overlapped_ms")).alias("exposed_ms"),
            (pl.col("overlapped_ms") / pl.col("comm_ms")).alias("overlap_fraction"),
        )
        .sort("band", "comm_class")
    )


def overlap_chart(overlap: pl.DataFrame, max_rows: int = 128) -> alt.HConcatChart:
    """Overlap fraction per rank and class, beside hidden against exposed time per class."""
    cells = overlap_cells(overlap, max_rows)
    # Order by a number, never by a list of class names: vega-lite compiles a sort list into an
    # expression, and class names are untrusted text.
    cells = cells.with_columns(
        pl.when(pl.col("comm_class") == ALL_COMM)
        .then(0)
        .otherwise(pl.col("comm_class").rank("dense") + 1)
        .alias("order")
    )
    grouped = cells["ranks"].str.contains("-").any()
    bands = cells["band"].n_unique()
    heat = (
        alt.Chart(inline(cells), title="overlapped share of communication, per rank and class")
        .mark_rect()
        .encode(
            x=alt.X(
                "comm_class:N", title="communication class", sort=alt.EncodingSortField("order", op="min")
            ),
            y=alt.Y(
                "band:O",
                title="ranks (first of band)" if grouped else "rank",
                axis=alt.Axis(labelOverlap=True),
            ),
            color=alt.Color(
                "overlap_fraction:Q", scale=alt.Scale(domain=[0, 1], scheme="greens"), title="overlapped"
            ),
            tooltip=[
                alt.Tooltip("ranks:N"),
                alt.Tooltip("comm_class:N", title="class"),
                alt.Tooltip("overlap_fraction:Q", format=".1%", title="overlapped"),
                alt.Tooltip("comm_ms:Q", format=".3f", title="communication (ms)"),
                alt.Tooltip("exposed_ms:Q", format=".3f", title="exposed (ms)"),
            ],
        )
        .properties(width=max(70 * cells["comm_class"].n_unique(), 240), height=min(max(14 * bands, 80), 520))
    )
    totals = (
        cells.filter(pl.col("comm_class") != ALL_COMM)
        .group_by("comm_class")
        .agg(pl.col("overlapped_ms").sum().alias("hidden"), pl.col("exposed_ms").sum().alias("exposed"))
        .unpivot(index="comm_class", variable_name="part", value_name="ms")
        .sort("comm_class", "part")
    )
    stacked = (
        alt.Chart(inline(totals), title="all ranks: hidden under compute against exposed")
        .mark_bar()
        .encode(
            x=alt.X("ms:Q", title="communication time, summed over ranks (ms)"),
            y=alt.Y("comm_class:N", title=None),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=["hidden", "exposed"], range=["#009E73", "#D55E00"]),
                title=None,
            ),
            tooltip=[
                alt.Tooltip("comm_class:N", title="class"),
                alt.Tooltip("part:N"),
                alt.Tooltip("ms:Q", format=".3f"),
            ],
        )
        .properties(width=320, height=min(max(28 * totals["comm_class"].n_unique(), 80), 300))
    )
    return (
        alt.hconcat(heat, stacked)
        .properties(title=alt.Title("Communication / compute overlap (GPU kernels)"))
        .resolve_scale(color="independent")
    )
