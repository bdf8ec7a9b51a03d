"""The dependency graph of one training step: what must finish before each op can start.

A graph holds *template* nodes: one per op of one replica of the step. The replay engine runs the
same graph for many replicas at once (steps, data-parallel ranks), so a node stands for an op on
every replica. Edges are in-rank order and cross-rank data dependencies. Ops that synchronize (the
two ends of a p2p transfer, the members of a collective) form a ``SyncGroup``: none of them
completes before the last member has started, and the group then takes its own transfer time.

This module holds values and their validation only: no timing (``replay``), no input formats.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import pairwise


@dataclass(frozen=True)
class SyncGroup:
    """Ops that complete together: each ends ``transfer`` after the last member starts."""

    members: tuple[int, ...]
    across_dp: bool
    """True when the group also waits for the same op on every data-parallel replica (DP collectives)."""


@dataclass(frozen=True)
class DependencyGraph:
    """Template nodes, their predecessors, their sync groups and a valid replay order."""

    labels: tuple[str, ...]
    """One name per node, for messages (``forward-compute_3_0``, ``r2:1F5``)."""
    deps: tuple[tuple[int, ...], ...]
    """Predecessors of each node: it starts when all of them have ended."""
    groups: tuple[SyncGroup, ...]
    order: tuple[tuple[int, ...], ...]
    """Super-nodes in topological order: a sync group's members together, any other node alone."""

    @property
    def size(self) -> int:
        """Number of template nodes."""
        return len(self.labels)


class GraphCycleError(ValueError):
    """The edges and groups admit no replay order (a dependency model fault or inconsistent input)."""


class GraphBuilder:
    """Collects nodes, edges and groups, then ``build`` checks them and fixes a replay order."""

    def __init__(self) -> None:
        self._labels: list[str] = []
        self._index: dict[str, int] = {}
        self._deps: list[list[int]] = []
        self._groups: list[SyncGroup] = []

    def node(self, label: str) -> int:
        """The node named ``label``, created on first use."""
        if label not in self._index:
            self._index[label] = len(self._labels)
            self._labels.append(label)
            self._deps.append([])
        return self._index[label]

    def edge(self, before: int, after: int) -> None:
        """``after`` cannot start before ``before`` has ended."""
        assert before != after, self._labels[before]
        if before not in self._deps[after]:
            self._deps[after].append(before)

    def chain(self, nodes: list[int]) -> None:
        """Each node waits for the previous one (one stream's program order)."""
        for before, after in pairwise(nodes):
            self.edge(before, after)

    def group(self, members: list[int], across_dp: bool = False) -> None:
        """Make ``members`` one sync group."""
        self._groups.append(SyncGroup(tuple(members), across_dp))

    def build(self) -> DependencyGraph:
        """The finished graph; GraphCycleError when no replay order exists."""
        grouped: dict[int, int] = {}
        for index, group in enumerate(self._groups):
            for member in group.members:
                assert member not in grouped, f"{self._labels[member]} is in two sync groups"
                grouped[member] = index
        supers: list[tuple[int, ...]] = [g.members for g in self._groups]
        supers += [(node,) for node in range(len(self._labels)) if node not in grouped]
        super_of = {node: index for index, members in enumerate(supers) for node in members}
        successors: list[set[int]] = [set() for _ in supers]
        indegree = [0] * len(supers)
        for node, deps in enumerate(self._deps):
            for dep in deps:
                a, b = super_of[dep], super_of[node]
                if a == b:
                    raise GraphCycleError(
                        f"{self._labels[node]} waits for {self._labels[dep]} of its own group"
                    )
                if b not in successors[a]:
                    successors[a].add(b)
                    indegree[b] += 1
        ready = deque(index for index, degree in enumerate(indegree) if degree == 0)
        order: list[tuple[int, ...]] = []
        while ready:
            current = ready.popleft()
            order.append(supers[current])
            for nxt in sorted(successors[current]):
                indegree[nxt] -= 1
                if indegree[nxt] == 0:
                    ready.append(nxt)
        if len(order) != len(supers):
            stuck = [self._labels[m] for i, d in enumerate(indegree) if d > 0 for m in supers[i]]
            raise GraphCycleError(f"dependency cycle among {len(stuck)} ops, e.g. {stuck[:6]}")
        return DependencyGraph(
            labels=tuple(self._labels),
            deps=tuple(tuple(deps) for deps in self._deps),
            groups=tuple(self._groups),
            order=tuple(order),
        )
