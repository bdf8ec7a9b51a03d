"""A replay as a timeline: the realized actions re-timed by a replay of the run's dependency graph.

The ideal timeline of the dashboard and the ideal bubble are the what-if's ideal replay itself
(``tracekit.analysis.ideal.IDEAL_DEFINITION``), not a fresh simulation: each action takes the
replayed end of its op (node), and starts its replayed duration before it (an op's time in the
replay is its duration plus, in a replay that keeps them, its gap: the wait before the work). The
frame is ``REALIZED_SCHEMA``, each step from 0 ns, so ``tracekit.analysis.utilization`` measures
its bubble exactly as it measures the realized one.

Not for: the replay itself (``tracekit.whatif.case``) or choosing the durations (``tracekit.analysis.ideal``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.analysis.realized import REALIZED_SCHEMA
from tracekit.whatif.case import ReplayCase


def replayed_actions(
    actions: pl.DataFrame, node_of_action: np.ndarray, case: ReplayCase, durations_ms: np.ndarray, occupied_ms: np.ndarray
) -> pl.DataFrame:
    """``actions`` (``REALIZED_SCHEMA``) re-timed by a replay in which op ``i`` occupies ``occupied_ms[i]``.

    ``node_of_action`` gives each row of ``actions`` its op's row in ``case.ops`` (one op per node,
    slot and replica 0: a captured run's case); ``durations_ms`` is each op's work within its
    occupied time. Times are ns from the start of each step's replay; both halves of an
    overlapped pair take their pair's span.
    """
    assert case.shape[1:] == (1, 1), "a captured run's case: one slot, one replica column"
    assert node_of_action.shape == (actions.height,)
    end_ms = case.replay(occupied_ms).end[:, 0, 0]
    start_ms = end_ms - np.minimum(durations_ms, occupied_ms)
    to_ns = 1e6
    return actions.with_columns(
        pl.Series("start_ns", np.round(start_ms[node_of_action] * to_ns).astype(np.int64)),
        pl.Series("end_ns", np.round(end_ms[node_of_action] * to_ns).astype(np.int64)),
    ).select(list(REALIZED_SCHEMA)).sort("rank", "start_ns", "end_ns")
