"""The schedule-comparison view: simulated bubble fraction against micro-batches, this run marked.

Sweep input, ``SWEEP_INPUT`` (from ``tracekit.schedule.sweep.SWEEP_SCHEMA``, one row per
simulated schedule and micro-batch count at this run's P):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| schedule | String | schedule name | never null |
| microbatches | Int32 | micro-batches per step | never null |
| bubble_fraction | Float64 | mean over ranks of idle / makespan (``1 - utilization``) | never null |

Marker input, ``MARKER_INPUT`` (one row per point to mark): label (String), microbatches (Int32),
bubble_fraction (Float64, the same definition measured on this run, or its ideal replay).

Not for: running the sweep (``tracekit.schedule.sweep``).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from dashboards.encoding import WIDTH, check_columns, inline

SWEEP_INPUT: dict[str, pl.DataType] = {
    "schedule": pl.String(),
    "microbatches": pl.Int32(),
    "bubble_fraction": pl.Float64(),
}

MARKER_INPUT: dict[str, pl.DataType] = {
    "label": pl.String(),
    "microbatches": pl.Int32(),
    "bubble_fraction": pl.Float64(),
}


def from_sweep(sweep: pl.DataFrame) -> pl.DataFrame:
    """``SWEEP_INPUT`` rows from ``tracekit.schedule.sweep.sweep`` rows."""
    return sweep.select("schedule", "microbatches", (1 - pl.col("utilization")).alias("bubble_fraction"))


def comparison_chart(sweep: pl.DataFrame, markers: pl.DataFrame, pp: int, subtitle: str) -> alt.LayerChart:
    """One line per schedule over micro-batches, this run's points marked and labelled."""
    sweep = check_columns(sweep, SWEEP_INPUT, "comparison")
    markers = check_columns(markers, MARKER_INPUT, "comparison markers")
    y = alt.Y("bubble_fraction:Q", title="bubble fraction (mean over ranks)", axis=alt.Axis(format="%"))
    x = alt.X("microbatches:Q", title="micro-batches per step", scale=alt.Scale(type="log", base=2))
    lines = (
        alt.Chart(inline(sweep))
        .mark_line(point=alt.OverlayMarkDef(filled=True, size=50))
        .encode(
            x=x,
            y=y,
            color=alt.Color("schedule:N", title="schedule", scale=alt.Scale(scheme="tableau10")),
            # Schedules with equal bubbles (gpipe and 1f1b) draw one line: dashes keep both seen.
            strokeDash=alt.StrokeDash("schedule:N", title="schedule"),
            tooltip=[
                alt.Tooltip("schedule:N"),
                alt.Tooltip("microbatches:Q", title="micro-batches"),
                alt.Tooltip("bubble_fraction:Q", format=".1%", title="bubble"),
            ],
        )
    )
    marked = alt.Chart(inline(markers)).encode(x=x, y=y)
    points = marked.mark_point(shape="diamond", size=160, filled=True, color="black").encode(
        tooltip=[
            alt.Tooltip("label:N"),
            alt.Tooltip("microbatches:Q", title="micro-batches"),
            alt.Tooltip("bubble_fraction:Q", format=".1%", title="bubble"),
        ]
    )
    labels = marked.mark_text(align="left", dx=9, dy=-8, fontSize=11).encode(text="label:N")
    return (lines + points + labels).properties(
        width=WIDTH,
        height=300,
        title=alt.Title(f"Simulated bubble fraction against micro-batches at P = {pp}", subtitle=subtitle),
    )
