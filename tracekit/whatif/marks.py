"""Per-action marks for a timeline of the whole run: its replay node, its place on the critical path, its ideal span.

A timeline viewer (``tracekit.present.perfetto``) draws each realized action, and beside it what
the analysis says of it. This module puts those facts on the action rows, on the realized clock,
so the viewer only formats:

``MARKED_SCHEMA``, one row per realized action, in the order of the actions frame:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| (every column of ``REALIZED_SCHEMA``) | | the realized action, ns on the run's one aligned clock | |
| node | Int64 | the action's op in the replay case (an overlapped F&B pair's halves share one) | never null |
| critical_position | Int32 | place on its step's critical path (``tracekit.whatif.critical``), 0 first | off the path |
| ideal_start_ns, ideal_end_ns | Int64 | the op's span in the ideal replay (``tracekit.analysis.ideal.IDEAL_DEFINITION``: the what-if's ideal step and the dashboard's ideal timeline), laid from the step's realized start | never null |

Not for: finding the critical path or the ideal (the modules named above), or drawing either.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.analysis.realized import REALIZED_SCHEMA
from tracekit.whatif.case import ReplayCase

MARKED_SCHEMA: dict[str, pl.DataType] = {
    **REALIZED_SCHEMA,
    "node": pl.Int64(),
    "critical_position": pl.Int32(),
    "ideal_start_ns": pl.Int64(),
    "ideal_end_ns": pl.Int64(),
}


def mark_actions(
    actions: pl.DataFrame,
    case: ReplayCase,
    action_nodes: np.ndarray,
    critical: pl.DataFrame | None,
    ideal_ms: np.ndarray,
    occupied_ms: np.ndarray,
) -> pl.DataFrame:
    """``MARKED_SCHEMA``: ``actions`` (``REALIZED_SCHEMA``) with their node, critical position and ideal span.

    ``action_nodes``: each action's op row in ``case.ops`` (``pipeline_case_nodes``); ``critical``:
    ``CRITICAL_SCHEMA`` rows, None when there is no path; ``ideal_ms``: each op's ideal duration,
    aligned with ``case.ops``; ``occupied_ms``: what each op occupies in the ideal replay (its
    duration, plus its gap where the replay keeps gaps), as ``RunAnalysis.ideal_timeline`` replays it.
    """
    assert action_nodes.shape == (actions.height,)
    ideal_end = case.replay(occupied_ms).end[:, 0, 0]
    ideal_start = ideal_end - np.minimum(ideal_ms, occupied_ms)
    rows = actions.with_columns(pl.Series("node", action_nodes, dtype=pl.Int64()))
    step_start = pl.col("start_ns").min().over("step")
    if critical is not None:
        on_path = critical.select(
            pl.col("node").cast(pl.Int64()), pl.col("position").alias("critical_position")
        )
    else:
        on_path = pl.DataFrame(schema={"node": pl.Int64(), "critical_position": pl.Int32()})
    return (
        rows.join(on_path, on="node", how="left", maintain_order="left")
        .with_columns(
            (step_start + pl.Series(np.round(ideal_start[action_nodes] * 1e6)).cast(pl.Int64())).alias(
                "ideal_start_ns"
            ),
            (step_start + pl.Series(np.round(ideal_end[action_nodes] * 1e6)).cast(pl.Int64())).alias(
                "ideal_end_ns"
            ),
        )
        .select(list(MARKED_SCHEMA))
        .cast(MARKED_SCHEMA)  # type: ignore[arg-type]
    )
