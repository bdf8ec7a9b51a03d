"""The dependency graph of one training step: what must finish before each op can start.

A graph holds *template* nodes: one per op of one replica of the step. The timing engine
(``tracekit.schedule.timing``) replays the same graph for many replicas at once (steps,
data-parallel ranks), so a node stands for an op on every replica. Edges are in-rank order and
cross-rank data dependencies. Ops that synchronize (the two ends of a p2p transfer, the members of
a collective) form a ``SyncGroup``: none of them completes before the last member has started, and
the group then takes its own transfer time.

This module holds values and their validation only: no timing (the engine), no input formats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from tracekit.schedule.timing import DependencyCycle, TimingGraph, timing_graph


@dataclass(frozen=True)
class SyncGroup:
    """Ops that complete together: each ends ``transfer`` after the last member starts."""

    members: tuple[int, ...]
    across_dp: bool
    """True when the group also waits for the same op on every data-parallel replica (DP collectives)."""


@dataclass(frozen=True, eq=False)
class DependencyGraph:
    """Template nodes, their dependency edges, their sync groups, compiled for the timing engine."""

    labels: tuple[str, ...]
    """One name per node, for messages (``forward-compute_3_0``, ``r2:1F5``)."""
    sources: np.ndarray
    """Edge ``i`` runs from node ``sources[i]``..."""
    targets: np.ndarray
    """...to node ``targets[i]``, which starts once ``sources[i]`` has ended."""
    groups: tuple[SyncGroup, ...]
    timing: TimingGraph
    """The engine's form, its levels compiled (which refused any cycle)."""

    @property
    def size(self) -> int:
        """Number of template nodes."""
        return len(self.labels)


class GraphCycleError(ValueError):
    """The edges and groups admit no replay order (a dependency model fault or inconsistent input)."""


def dependency_graph(
    labels: Sequence[str],
    sources: np.ndarray,
    targets: np.ndarray,
    groups: Sequence[SyncGroup] = (),
) -> DependencyGraph:
    """The graph of ``labels`` with edges ``sources[i] -> targets[i]``; GraphCycleError when it cannot be replayed."""
    labels = tuple(labels)
    sources = np.asarray(sources, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    group_of = np.full(len(labels), -1, dtype=np.int64)
    for index, group in enumerate(groups):
        assert (group_of[list(group.members)] < 0).all(), "a node is in two sync groups"
        group_of[list(group.members)] = index
    inside = (group_of[sources] >= 0) & (group_of[sources] == group_of[targets])
    if inside.any():
        edge = int(np.flatnonzero(inside)[0])
        raise GraphCycleError(
            f"{labels[targets[edge]]} waits for {labels[sources[edge]]} of its own group"
        )
    timing = timing_graph(
        len(labels), sources, targets, groups=[(group.members, group.across_dp) for group in groups]
    )
    try:
        timing.plan  # noqa: B018 - compiling the levels once refuses a cycle now, not at the first replay
    except DependencyCycle as cycle:
        stuck = [labels[node] for node in np.flatnonzero(~cycle.ran).tolist()]
        raise GraphCycleError(f"dependency cycle among {len(stuck)} ops, e.g. {stuck[:6]}") from None
    return DependencyGraph(labels, sources, targets, tuple(groups), timing)


class GraphBuilder:
    """Collects named nodes, edges and groups one by one, then ``build`` makes the graph."""

    def __init__(self) -> None:
        self._labels: list[str] = []
        self._index: dict[str, int] = {}
        self._edges: set[tuple[int, int]] = set()
        self._groups: list[SyncGroup] = []

    def node(self, label: str) -> int:
        """The node named ``label``, created on first use."""
        if label not in self._index:
            self._index[label] = len(self._labels)
            self._labels.append(label)
        return self._index[label]

    def edge(self, before: int, after: int) -> None:
        """``after`` cannot start before ``before`` has ended."""
        assert before != after, self._labels[before]
        self._edges.add((before, after))

    def chain(self, nodes: list[int]) -> None:
        """Each node waits for the previous one (one stream's program order)."""
        for before, after in pairwise(nodes):
            self.edge(before, after)

    def group(self, members: list[int], across_dp: bool = False) -> None:
        """Make ``members`` one sync group."""
        self._groups.append(SyncGroup(tuple(members), across_dp))

    def build(self) -> DependencyGraph:
        """The finished graph; GraphCycleError when no replay order exists."""
        edges = np.array(sorted(self._edges), dtype=np.int64).reshape(-1, 2)
        return dependency_graph(self._labels, edges[:, 0], edges[:, 1], self._groups)
