"""Many counterfactual replays of one case at once, each replaying only what its change reaches.

A counterfactual is the case's base durations with some ops changed (a straggler at reference
speed, one group's real durations restored into the ideal). Straggler pricing and what-if
attribution ask for one per rank, per (rank, kind), per stage: replaying the whole graph for each
grows as ranks squared. Two facts make it linear:

- the graph falls into *components* that share no edge and no sync group (each step of a realized
  run is one; each data-parallel pipeline replica is one): a change reaches only the components
  holding its ops, and a step's time is the latest end over the components it runs in;
- changes that reach disjoint components can share one replay: column ``k`` of a batch holds,
  in each component, the durations of the ``k``-th change that reaches it (the base elsewhere).

So changes are packed into columns (a change goes into the first column free on all its
components), the columns replay together through the engine's per-level numpy path (a matrix of
duration vectors, chunked so that memory stays bounded), and each change's step times are the
latest of its own components' replayed ends and the base ends of every other component. The
arithmetic is the engine's, node by node, so every figure equals a full replay's to the bit.

Not for: what the changes mean (``tracekit.stragglers.price``, ``tracekit.whatif.attribution``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.schedule.timing import TimingGraph, replay
from tracekit.whatif.case import ReplayCase

CELL_BUDGET = 1 << 21
"""Most duration cells (nodes x replicas x columns) one batched replay holds: about 16 MB per array."""


@dataclass(frozen=True)
class Change:
    """One counterfactual: ops ``rows`` (positions in ``case.ops``) run ``values`` ms, the rest their base."""

    rows: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        assert self.rows.shape == self.values.shape, (self.rows.shape, self.values.shape)


def rows_by(ops: pl.DataFrame, keys: list[str]) -> dict[tuple, np.ndarray]:
    """Row positions of ``ops`` per distinct value of ``keys`` (one pass, not one filter per key)."""
    grouped = ops.select(keys).with_row_index("row").group_by(keys).agg(pl.col("row"))
    return {tuple(key): np.asarray(rows, dtype=np.int64) for *key, rows in grouped.iter_rows()}


def components(graph: TimingGraph) -> np.ndarray:
    """Per node: the smallest node of its component (nodes linked by edges, lanes or sync groups)."""
    sources, targets, _ = graph.all_edges()
    linked = [(sources, targets)]
    for members, _across in graph.groups:
        linked.append((np.full(members.size, members[0]), members))
    sources = np.concatenate([pair[0] for pair in linked])
    targets = np.concatenate([pair[1] for pair in linked])
    parent = np.arange(graph.num_nodes, dtype=np.int64)
    while True:
        # Hook each edge's larger root onto its smaller one, then flatten every path to its root.
        low, high = np.minimum(parent[sources], parent[targets]), np.maximum(parent[sources], parent[targets])
        apart = low != high
        if not apart.any():
            return parent
        np.minimum.at(parent, high[apart], low[apart])
        while True:
            grand = parent[parent]
            if (grand == parent).all():
                break
            parent = grand


class Counterfactuals:
    """Step times of one case under many changes of one base, each replaying only the components it reaches."""

    def __init__(self, case: ReplayCase, base: np.ndarray, cell_budget: int = CELL_BUDGET) -> None:
        assert base.shape == (case.ops.height,)
        self.case = case
        self.base = base
        self.cell_budget = cell_budget
        nodes, slots, dp = case.cells
        self._nodes, self._slots, self._dp = nodes, slots, dp
        roots = components(case.graph.timing)
        _, self._component = np.unique(roots, return_inverse=True)
        self._count = int(self._component.max()) + 1 if self._component.size else 0
        step_code = case.step_index  # (nodes, slots): position of each cell's step in case.steps
        self._num_steps = len(case.steps)
        # One code per (node, slot): its component and step, and the cells sorted by it for reductions.
        code = (self._component[:, None] * self._num_steps + step_code).ravel()
        self._order = np.argsort(code, kind="stable")
        sorted_code = code[self._order]
        self._bounds = np.flatnonzero(np.diff(sorted_code, prepend=-1))
        self._present = sorted_code[self._bounds]
        base_ends = self._component_steps(replay(case.graph.timing, case.matrix(base)).end[:, None])
        self.base_component_steps = base_ends[:, :, 0]
        """(components, steps): the latest base end of each component in each step (0 when absent)."""
        self.base_steps = self.base_component_steps.max(axis=0) if self._count else np.zeros(self._num_steps)
        """Base step times in ``case.steps`` order, as ``case.replay_step_times(base)`` gives them."""
        self._ranked = [
            [
                (int(c), float(self.base_component_steps[c, s]))
                for c in np.argsort(-self.base_component_steps[:, s], kind="stable")
            ]
            for s in range(self._num_steps)
        ]

    def _component_steps(self, end: np.ndarray) -> np.ndarray:
        """``end`` (nodes, columns, slots, dp) -> (components, steps, columns) latest ends, 0 where none."""
        latest = end.max(axis=-1).transpose(0, 2, 1).reshape(-1, end.shape[1])  # (node * slot, columns)
        reduced = np.maximum.reduceat(latest[self._order], self._bounds, axis=0)
        out = np.zeros((self._count * self._num_steps, end.shape[1]))
        out[self._present] = np.maximum(reduced, 0.0)
        return out.reshape(self._count, self._num_steps, end.shape[1])

    def moved(self, change: Change) -> Change:
        """``change`` without the rows it leaves at their base duration."""
        moves = change.values != self.base[change.rows]
        return Change(change.rows[moves], change.values[moves])

    def reached(self, change: Change) -> np.ndarray:
        """Components whose durations ``change`` alters (sorted)."""
        return np.unique(self._component[self._nodes[self.moved(change).rows]])

    def step_times(self, changes: Sequence[Change]) -> np.ndarray:
        """(changes, steps): each change's replayed step times, equal to a full replay of its durations."""
        out = np.empty((len(changes), self._num_steps))
        # Only moved rows are written: a row left at its base may lie in a component another change
        # of the same column owns.
        changes = [self.moved(change) for change in changes]
        reached = [np.unique(self._component[self._nodes[change.rows]]) for change in changes]
        column = np.empty(len(changes), dtype=np.int64)
        next_free = np.zeros(self._count, dtype=np.int64)
        for index, comps in enumerate(reached):
            if comps.size == 0:
                column[index] = -1
                out[index] = self.base_steps
                continue
            column[index] = int(next_free[comps].max())
            next_free[comps] = column[index] + 1
        columns = int(column.max()) + 1 if len(changes) else 0
        chunk = max(1, self.cell_budget // max(1, self.case.ops.height))
        base = self.case.matrix(self.base)[:, None]
        for first in range(0, columns, chunk):
            last = min(columns, first + chunk)
            members = np.flatnonzero((column >= first) & (column < last))
            durations = np.repeat(base, last - first, axis=1)
            for index in members.tolist():
                change = changes[index]
                rows = change.rows
                durations[self._nodes[rows], column[index] - first, self._slots[rows], self._dp[rows]] = (
                    change.values
                )
            ends = self._component_steps(replay(self.case.graph.timing, durations).end)
            for index in members.tolist():
                out[index] = self._combine(reached[index], ends[:, :, column[index] - first])
        return out

    def _combine(self, comps: np.ndarray, replayed: np.ndarray) -> np.ndarray:
        """Per step: the latest of the reached components' replayed ends and every other one's base end."""
        own = replayed[comps].max(axis=0)
        mine = set(comps.tolist())
        others = np.zeros(self._num_steps)
        for step, ranked in enumerate(self._ranked):
            for comp, end in ranked:
                if comp not in mine:
                    others[step] = end
                    break
        return np.maximum(own, others)
