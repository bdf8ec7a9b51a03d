"""The realized schedule on the GPU: CPU-side labels projected onto the kernels they launched.

On a GPU trace a label's CPU span only says when work was *launched*; the GPU may run it much
later, and overlapped work of two labels interleaves on the streams. ``subchunk_schedule`` gives each
sub-chunk label (DeepSeek's ``attn``/``dispatch``/``mlp``/``combine`` with F, B, W) its GPU extent
and busy time; ``project_actions`` gives each schedule action the GPU extent of its work, from
which ``tracekit.analysis.realized`` puts a run's actions on the GPU clock.

Not for: reading the labels themselves (``tracekit.trace.labels``, ``tracekit.analysis.realized``).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.analysis.realized import RANK_ACTIONS_SCHEMA, REALIZED_SCHEMA
from tracekit.gpu.timeline import project_spans
from tracekit.trace.labels import Role, match_labels

SUBCHUNK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "index": pl.UInt32(),
    "op": pl.String(),
    "kind": pl.String(),
    "cpu_start_ns": pl.Int64(),
    "cpu_end_ns": pl.Int64(),
    "gpu_start_ns": pl.Int64(),
    "gpu_end_ns": pl.Int64(),
    "gpu_busy_ns": pl.Int64(),
    "compute_ns": pl.Int64(),
    "comm_ns": pl.Int64(),
    "kernels": pl.UInt32(),
}
"""One row per sub-chunk label span, in CPU order per rank (``index`` counts from 0). ``op``: attn,
dispatch, mlp, combine; ``kind``: F, B, W. CPU times are the label's span; GPU times the first
start and last end of the work it launched; busy/compute/comm the union of that work (all, compute
only, communication only), ns. GPU columns are null and ``kernels`` 0 for a label that launched
nothing."""


@dataclass(frozen=True)
class GpuSchedule:
    """Projected labels and what could not be projected."""

    frame: pl.DataFrame
    warnings: tuple[str, ...]


def _project(spans: pl.DataFrame, activities: pl.DataFrame) -> pl.DataFrame:
    spans = spans.with_row_index("span_id")
    return spans.join(project_spans(spans, activities), on="span_id", how="left").with_columns(
        pl.col("kernels").fill_null(0)
    )


def subchunk_schedule(events: pl.DataFrame, activities: pl.DataFrame) -> GpuSchedule:
    """Each sub-chunk label of ``events`` with the GPU extent of its work (``SUBCHUNK_SCHEMA``)."""
    labels = match_labels(events.filter(pl.col("cat") == "user_annotation"))
    spans = (
        labels.filter(pl.col("role") == Role.SUBCHUNK.value)
        .select("rank", "op", "kind", "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
        .sort("rank", "start_ns")
    )
    projected = _project(spans, activities).with_columns(
        pl.int_range(pl.len(), dtype=pl.UInt32()).over("rank").alias("index"),
        pl.col("start_ns").alias("cpu_start_ns"),
        pl.col("end_ns").alias("cpu_end_ns"),
    )
    frame = projected.select(list(SUBCHUNK_SCHEMA)).cast(SUBCHUNK_SCHEMA)  # type: ignore[arg-type]
    empty = frame.filter(pl.col("kernels") == 0)
    warnings = (
        (f"{empty.height} sub-chunk labels launched no GPU work: they have no GPU times",)
        if empty.height
        else ()
    )
    return GpuSchedule(frame=frame, warnings=warnings)


PROJECTION_COLUMNS: dict[str, pl.DataType] = {
    "gpu_start_ns": pl.Int64(),
    "gpu_end_ns": pl.Int64(),
    "kernels": pl.UInt32(),
    "gpu_busy_ns": pl.Int64(),
    "launch_wait_ns": pl.Int64(),
    "launching_ns": pl.Int64(),
}
"""What ``project_actions`` adds to the actions it is given."""

ACTION_PROJECTION_SCHEMA: dict[str, pl.DataType] = {**REALIZED_SCHEMA, **PROJECTION_COLUMNS}
"""Realized actions (CPU label spans) with the GPU extent of the work launched inside each: first
start and last end, ns, how many activities, the union of their time (``gpu_busy_ns``), the GPU
idle between them while the next one's launch had not returned (``launch_wait_ns``) and the part
of the extent before the action's last launch returned (``launching_ns``;
``tracekit.gpu.timeline.PROJECTION_SCHEMA``); GPU columns null and ``kernels`` 0 for an action
that launched nothing."""

RANK_PROJECTION_SCHEMA: dict[str, pl.DataType] = {**RANK_ACTIONS_SCHEMA, **PROJECTION_COLUMNS}
"""One rank's projection, before its replica is known (``tracekit.analysis.realized.RANK_ACTIONS_SCHEMA``)."""


def project_actions(actions: pl.DataFrame, activities: pl.DataFrame) -> pl.DataFrame:
    """Actions (``REALIZED_SCHEMA``, or one rank's ``RANK_ACTIONS_SCHEMA``) with the GPU extent of their work.

    The result has the given columns then ``PROJECTION_COLUMNS`` (``ACTION_PROJECTION_SCHEMA`` for
    realized actions). Which clock the run's actions then use is ``tracekit.analysis.realized``'s
    choice, not this one's.
    """
    schema = {**actions.schema, **PROJECTION_COLUMNS}
    if actions.is_empty():  # a rank without labelled actions: nothing to project
        return pl.DataFrame(schema=schema)
    return _project(actions, activities).select(list(schema)).cast(schema)  # type: ignore[arg-type]
