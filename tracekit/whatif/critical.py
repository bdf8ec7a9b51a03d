"""The critical path of each replayed step: the chain of ops whose durations set the step time.

Walking back from the op that ends a step last, each op's *binding* predecessor is the one it
waited for: the predecessor (its rank's previous op, or a producer on another rank) whose end,
plus the edge's latency, equals the op's start; an op that starts at 0 ends the walk. Shortening
any op off the path leaves the step time as it is; shortening one on it moves the step's end (up
to the slack of the next-longest chain). Ties go to the predecessor on the same rank, so a rank
that simply ran its ops back to back reads as one stretch.

``CRITICAL_SCHEMA``, one row per op on a step's path, in path order:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| step | Int64 | training step | never null |
| position | Int32 | place on the path, 0 first | never null |
| rank | Int32 | rank that ran the op | never null |
| stage | Int32 | pipeline stage | never null |
| optype | String | op type (F, B, I, W, F&B) | never null |
| start_ms, end_ms | Float64 | replayed start (after the op's gap, when the replay holds gaps) and end, ms from the step's start | never null |
| via | String | ``start`` (the path's first op), ``rank`` (waited for its rank's previous op) or ``transfer`` (for another rank's op) | never null |
| node | Int32 | the op's node in the case (its row of ``ops``), to find the actions behind it | never null |

Only a case with one replica per node (a realized run: one slot, one data-parallel position) has
one path per step; op-table cases are refused by assertion.

Not for: replaying (``tracekit.schedule.timing``) or drawing the path (``dashboards``).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import polars as pl

from tracekit.whatif.case import ReplayCase

CRITICAL_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64(),
    "position": pl.Int32(),
    "rank": pl.Int32(),
    "stage": pl.Int32(),
    "optype": pl.String(),
    "start_ms": pl.Float64(),
    "end_ms": pl.Float64(),
    "via": pl.String(),
    "node": pl.Int32(),
}


def critical_paths(case: ReplayCase, durations: np.ndarray, gaps_ms: np.ndarray | None = None) -> pl.DataFrame:
    """``CRITICAL_SCHEMA``: each step's critical path when the ops run ``durations`` (aligned with ``ops``).

    ``gaps_ms``: the ops' gaps when ``durations`` hold them (``ReplayCase.occupied_ms``, the replay
    of the run as recorded); each op on the path then starts where its gap ends, where its own work
    began, and ``via`` still names what it waited for before its gap.
    """
    assert case.shape[1:] == (1, 1), "one path per step needs one replica per node"
    timing = case.graph.timing
    times = case.replay(durations)
    start, end = times.start[:, 0, 0], times.end[:, 0, 0]
    sources, targets, latency = timing.all_edges()
    arrival = end[sources] + (0.0 if latency is None else latency)
    # Of the predecessors that arrive exactly at the op's start, prefer the rank's own previous op.
    rank_of = np.empty(case.graph.size, dtype=np.int64)
    node = case.ops["node"].to_numpy()
    rank_of[node] = case.ops["rank"].to_numpy()
    binding = arrival == start[targets]
    other_rank = rank_of[sources] != rank_of[targets]
    order = np.lexsort((other_rank, targets))
    waited = np.full(case.graph.size, -1, dtype=np.int64)
    chosen = order[binding[order]]
    first = chosen[np.flatnonzero(np.diff(targets[chosen], prepend=-1))]
    waited[targets[first]] = sources[first]
    ops = case.ops.select("node", "step", "rank", "stage", "optype").sort("node")
    step_of = ops["step"].to_numpy()
    drawn_from = start.copy()
    if gaps_ms is not None:
        drawn_from[node] += np.maximum(gaps_ms, 0.0)
    parts = []
    for step in case.steps:
        in_step = np.flatnonzero(step_of == step)
        last = int(in_step[np.argmax(end[in_step])])
        path = [last]
        while start[path[-1]] > 0 and waited[path[-1]] >= 0:
            path.append(int(waited[path[-1]]))
        path.reverse()
        chain = np.asarray(path, dtype=np.int64)
        via = ["start"] + ["rank" if rank_of[a] == rank_of[b] else "transfer" for a, b in pairwise(path)]
        parts.append(
            ops[chain].with_columns(
                pl.Series("position", np.arange(chain.size, dtype=np.int32)),
                pl.Series("start_ms", drawn_from[chain]),
                pl.Series("end_ms", end[chain]),
                pl.Series("via", via, dtype=pl.String()),
            )
        )
    return pl.concat(parts).select(list(CRITICAL_SCHEMA)).cast(CRITICAL_SCHEMA)  # type: ignore[arg-type]
