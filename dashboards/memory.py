"""The memory view: each rank's allocated bytes over one step, with the schedule's ideal beside it.

Inputs are ``tracekit.analysis.memory``'s frames: ``TIMELINE_SCHEMA`` rows of the step shown
(allocated bytes, and what the schedule accounts for at each moment: model state, gradients
allocated by then, activations in flight x bytes per micro-batch, the bytes the step started
with) and ``RANK_MEMORY_SCHEMA`` (the predicted peak, drawn as a dashed rule: the ideal; the
device's capacity when known). One row of the chart per rank, at most ``max_ranks`` of them (the
highest peaks; the subtitle says how many were left out); lines thinned to fit the page's row cap.
A rank within 10% of its device's capacity, or holding more than its schedule needs, is named in
the subtitle.

Not for: computing memory (``tracekit.analysis.memory``).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from dashboards.encoding import MAX_ROWS, WIDTH, inline
from dashboards.page import Section, View
from tracekit.run_analysis import NEAR_CAPACITY

TITLE = "Memory per rank over the step"
_MIB = float(2**20)
_SERIES = {"allocated_bytes": "measured", "schedule_bytes": "schedule's ideal"}


def _thinned(frame: pl.DataFrame, rows: int) -> pl.DataFrame:
    """Every k-th row per rank (the peak row kept) so the view embeds at most ``rows`` rows."""
    if frame.height <= rows:
        return frame
    every = -(-frame.height // rows)
    peak = pl.col("allocated_bytes") == pl.col("allocated_bytes").max().over("rank")
    return frame.filter((pl.int_range(pl.len()).over("rank") % every == 0) | peak)


def memory_chart(timeline: pl.DataFrame, ranks: pl.DataFrame, max_ranks: int = 16) -> alt.FacetChart:
    """Measured and schedule lines per rank over the step (MiB), the predicted peak as a rule."""
    shown = ranks.sort("peak_bytes", descending=True).head(max_ranks)["rank"]
    lines = (
        _thinned(timeline.filter(pl.col("rank").is_in(shown.implode())), MAX_ROWS // 3)
        .unpivot(index=["rank", "t_ms", "in_flight"], on=list(_SERIES), variable_name="series")
        .with_columns(pl.col("series").replace_strict(_SERIES), (pl.col("value") / _MIB).alias("mib"))
        .drop("value")
    )
    rules = ranks.filter(pl.col("rank").is_in(shown.implode()) & pl.col("predicted_bytes").is_not_null())
    rules = rules.select("rank", (pl.col("predicted_bytes") / _MIB).alias("mib"))
    color = alt.Color("series:N", title=None, scale=alt.Scale(range=["#0072B2", "#E69F00"]))
    line = (
        alt.Chart()
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("t_ms:Q", title="ms after the step's first action"),
            y=alt.Y("mib:Q", title="MiB"),
            color=color,
            tooltip=["series:N", alt.Tooltip("t_ms:Q", format=".2f"), alt.Tooltip("mib:Q", format=".2f"),
                     alt.Tooltip("in_flight:Q", title="micro-batches in flight")],
        )
        .transform_filter(alt.datum.kind == "line")
    )
    rule = (
        alt.Chart()
        .mark_rule(strokeDash=[4, 3], color="#E69F00")
        .encode(y="mib:Q", tooltip=[alt.Tooltip("mib:Q", format=".2f", title="ideal peak (MiB)")])
        .transform_filter(alt.datum.kind == "rule")
    )
    data = pl.concat(
        [lines.with_columns(pl.lit("line").alias("kind")), rules.with_columns(pl.lit("rule").alias("kind"))],
        how="diagonal",
    )
    return (
        alt.layer(line, rule, data=alt.Data(**inline(data)))
        .properties(width=WIDTH - 120, height=90)
        .facet(row=alt.Row("rank:O", title="rank"))
        .resolve_scale(y="independent")
    )


def _callouts(ranks: pl.DataFrame, shown: int) -> tuple[str, ...]:
    notes = []
    near = ranks.filter(pl.col("near_capacity"))["rank"].to_list()
    if near:
        notes.append(f"ranks {near} peak within {NEAR_CAPACITY:.0%} of their device's capacity")
    more = ranks.filter(pl.col("holds_more_than_schedule"))
    for row in more.iter_rows(named=True):
        notes.append(f"rank {row['rank']} holds more than its schedule needs: {row['finding']}")
    if ranks.height > shown:
        notes.append(f"{shown} of {ranks.height} ranks shown: the highest peaks")
    return tuple(notes)


def memory_section(
    timeline: pl.DataFrame, ranks: pl.DataFrame, step: int | None, notes: tuple[str, ...], max_ranks: int = 16
) -> Section:
    """The page's memory section, or a note saying why there is none."""
    if ranks.is_empty() or step is None:
        return Section("memory", TITLE, notes=notes or ("no memory figures for this run",))
    step_rows = timeline.filter(pl.col("step") == step)
    subtitle = (
        f"step {step}: measured allocated bytes against the schedule's account (model state, gradients, "
        "micro-batches in flight x bytes per micro-batch, the step's starting bytes); dashed: the ideal peak "
        "(the planner's formula with the simulator's peak in flight)",
    )
    chart = memory_chart(step_rows, ranks, max_ranks)
    return Section(
        "memory",
        TITLE,
        views=(View.of("memory", chart),),
        notes=subtitle + _callouts(ranks, min(max_ranks, ranks.height)) + notes,
    )
