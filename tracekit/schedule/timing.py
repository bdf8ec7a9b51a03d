"""The timing engine's core: when each node of a dependency graph runs, for one or many sets of durations.

One recurrence serves the simulator (``engine.simulate``), the what-if replay of realized runs and
op-tables (``tracekit.whatif``), the ideal and the planner: a node starts when all its predecessors
have ended, plus the edge's latency (at 0 when it has none), and ends its duration later. The
members of a sync group (the ends of a transfer, a collective; Lin et al., OSDI 2025, section 4)
all end their duration after the *latest* member start, over every data-parallel replica too when
the group is ``across_dp``.

A ``TimingGraph`` holds nodes, edges (with latencies), sync groups and *lanes* (runs of nodes
that each wait for the one before: a rank's program order). ``replay`` takes durations
``(nodes,)`` or ``(nodes, *replicas)``, e.g. ``(nodes, steps, dp)``, and runs one of two kernels of
the same recurrence (tests check they agree): for many replicas, wide graphs and repeated replays,
the graph is cut once into levels (a node's level is one more than its deepest predecessor's;
Kahn's algorithm a level at a time, ``TimingGraph.plan``) and each level runs as a few numpy steps
over all its nodes and replicas; for one set of durations on a narrow graph, each lane runs in
Python until a node waits for an unfinished one and parks on it (no per-level overhead). Either
refuses a cycle (``DependencyCycle``, naming the nodes that can never start).

Not for: what the nodes are (``engine`` for schedules, ``tracekit.whatif`` for runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

_WIDE_LEVEL = 48
"""Nodes per level (estimated from the longest lane) from which numpy level steps beat walking lanes."""


class DependencyCycle(ValueError):
    """Some nodes can never start: each waits, directly or through others, on itself."""

    def __init__(self, ran: np.ndarray) -> None:
        self.ran = ran
        """Per node: True when it can run (everything it waits for can)."""
        super().__init__(f"{int((~ran).sum())} of {ran.size} nodes wait on a dependency cycle")


@dataclass(frozen=True)
class _Level:
    """One level's work: its nodes with predecessors, their predecessors, and its sync groups."""

    fed: np.ndarray
    sources: np.ndarray
    latency: np.ndarray | None
    segments: np.ndarray
    """Where each fed node's predecessors begin in ``sources``."""
    members: np.ndarray | None = None
    """Sync-group members of this level, group by group."""
    group_starts: np.ndarray | None = None
    group_sizes: np.ndarray | None = None
    across_dp: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class TimingGraph:
    """Nodes, their dependency edges (with latencies) and sync groups, ready to replay."""

    num_nodes: int
    sources: np.ndarray
    """Edge ``i`` runs from ``sources[i]``..."""
    targets: np.ndarray
    """...to ``targets[i]``, which starts once ``sources[i]`` has ended, plus ``latency[i]``."""
    latency: np.ndarray | None
    """Per edge, in the durations' unit; None means 0 everywhere."""
    groups: tuple[tuple[np.ndarray, bool], ...]
    """(members, across_dp) of each sync group."""
    lanes: np.ndarray
    """Lane ``l`` is nodes ``lanes[l] .. lanes[l + 1] - 1``, each waiting for the one before (a rank's order)."""

    def all_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(sources, targets, latency) of every edge, the lanes' in-order ones (latency 0) included."""
        follows = np.ones(self.num_nodes, dtype=bool)
        follows[self.lanes[:-1][self.lanes[:-1] < self.num_nodes]] = False
        after = np.flatnonzero(follows)
        sources = np.concatenate([after - 1, self.sources])
        targets = np.concatenate([after, self.targets])
        latency = None if self.latency is None else np.concatenate([np.zeros(after.size), self.latency])
        return sources, targets, latency

    @cached_property
    def plan(self) -> tuple[_Level, ...]:
        """The graph cut into levels for replays over many replicas; raises ``DependencyCycle``."""
        return _plan(self)


def timing_graph(
    num_nodes: int,
    sources: np.ndarray,
    targets: np.ndarray,
    latency: np.ndarray | None = None,
    groups: Sequence[tuple[Sequence[int], bool]] = (),
    lanes: np.ndarray | None = None,
) -> TimingGraph:
    """The graph of edges ``sources[i] -> targets[i]`` (optional latencies), ``(members, across_dp)`` groups
    and ``lanes`` (offsets of runs of nodes that each wait for the previous; default: none)."""
    sources = np.asarray(sources, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    assert sources.shape == targets.shape and (latency is None or np.shape(latency) == sources.shape)
    assert sources.size == 0 or (min(sources.min(), targets.min()) >= 0 and max(sources.max(), targets.max()) < num_nodes)
    return TimingGraph(
        num_nodes,
        sources,
        targets,
        None if latency is None else np.asarray(latency, dtype=np.float64),
        tuple((np.asarray(members, dtype=np.int64), bool(across)) for members, across in groups),
        np.arange(num_nodes + 1, dtype=np.int64) if lanes is None else np.asarray(lanes, dtype=np.int64),
    )


def _levels(num: int, sources: np.ndarray, targets: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Kahn's algorithm a level at a time over the ``active`` nodes; -1 for nodes on or behind a cycle."""
    level = np.full(num, -1, dtype=np.int64)
    by_source = np.argsort(sources, kind="stable")
    successors = targets[by_source]
    pointer = np.zeros(num + 1, dtype=np.int64)
    np.cumsum(np.bincount(sources, minlength=num), out=pointer[1:])
    indegree = np.bincount(targets, minlength=num)
    frontier = np.flatnonzero(active & (indegree == 0))
    depth = 0
    while frontier.size:
        level[frontier] = depth
        low = pointer[frontier]
        count = pointer[frontier + 1] - low
        total = int(count.sum())
        if total == 0:
            break
        ends = np.cumsum(count)
        reached = successors[np.arange(total) + np.repeat(low - ends + count, count)]
        reached, hits = np.unique(reached, return_counts=True)
        indegree[reached] -= hits
        frontier = reached[indegree[reached] == 0]
        depth += 1
    return level


def _plan(graph: TimingGraph) -> tuple[_Level, ...]:
    num_nodes = graph.num_nodes
    sources, targets, latency = graph.all_edges()
    leader = np.arange(num_nodes, dtype=np.int64)
    group_of = np.full(num_nodes, -1, dtype=np.int64)
    for index, (members, _) in enumerate(graph.groups):
        assert (group_of[members] < 0).all(), "a node is in two sync groups"
        leader[members], group_of[members] = members[0], index
    assert not (leader[sources] == leader[targets]).any(), "an edge inside one sync group"
    level = _levels(num_nodes, leader[sources], leader[targets], leader == np.arange(num_nodes))[leader]
    if (level < 0).any():
        raise DependencyCycle(level >= 0)
    num_levels = int(level.max()) + 1 if num_nodes else 0
    order = np.lexsort((targets, level[targets]))
    fed_sorted, sources = targets[order], sources[order]
    latency = None if latency is None else latency[order]
    first_edge = np.flatnonzero(np.diff(fed_sorted, prepend=-1)) if fed_sorted.size else fed_sorted
    fed = fed_sorted[first_edge]
    fed_bounds = np.searchsorted(level[fed], np.arange(num_levels + 1)).tolist()
    edge_bounds = np.append(first_edge, sources.size).tolist()
    grouped = _grouped_by_level(graph.groups, group_of, level)
    plan = []
    for depth in range(num_levels):
        low, high = fed_bounds[depth], fed_bounds[depth + 1]
        first, stop = edge_bounds[low], edge_bounds[high]
        members = grouped.get(depth)
        if low == high and members is None:
            continue
        plan.append(
            _Level(
                fed=fed[low:high],
                sources=sources[first:stop],
                latency=None if latency is None else latency[first:stop],
                segments=first_edge[low:high] - first,
                **(members or {}),
            )
        )
    return tuple(plan)


def _grouped_by_level(
    groups: tuple[tuple[np.ndarray, bool], ...], group_of: np.ndarray, level: np.ndarray
) -> dict[int, dict[str, np.ndarray]]:
    """Per level holding sync groups: their members group by group, where each begins, sizes, across_dp."""
    if not groups:
        return {}
    members = np.flatnonzero(group_of >= 0)
    members = members[np.lexsort((members, group_of[members], level[members]))]
    owner = group_of[members]
    across = np.array([across_dp for _, across_dp in groups], dtype=bool)
    depths, bounds = np.unique(level[members], return_index=True)
    bounds = np.append(bounds, members.size).tolist()
    by_level: dict[int, dict[str, np.ndarray]] = {}
    for index, depth in enumerate(depths.tolist()):
        chosen = members[bounds[index] : bounds[index + 1]]
        starts = np.flatnonzero(np.diff(owner[bounds[index] : bounds[index + 1]], prepend=-1))
        by_level[depth] = {
            "members": chosen,
            "group_starts": starts,
            "group_sizes": np.diff(np.append(starts, chosen.size)),
            "across_dp": across[group_of[chosen[starts]]],
        }
    return by_level


@dataclass(frozen=True)
class NodeTimes:
    """Start and end of every node on every replica, shaped like the durations."""

    start: np.ndarray
    end: np.ndarray


def replay(graph: TimingGraph, durations: np.ndarray) -> NodeTimes:
    """Start and end of every node when each runs for ``durations`` (``(nodes,)`` or ``(nodes, *replicas)``).

    Raises ``DependencyCycle`` when some nodes can never start.
    """
    durations = np.asarray(durations, dtype=np.float64)
    assert durations.shape[:1] == (graph.num_nodes,), (durations.shape, graph.num_nodes)
    assert not np.isnan(durations).any(), "durations hold NaN"
    longest_lane = int(np.diff(graph.lanes).max()) if graph.num_nodes else 1
    narrow = graph.num_nodes < _WIDE_LEVEL * longest_lane and "plan" not in graph.__dict__
    if durations.ndim == 1 and not graph.groups and narrow:
        return _in_order(graph, durations)
    return _by_level(graph, durations)


def _in_order(graph: TimingGraph, durations: np.ndarray) -> NodeTimes:
    """One set of durations: each lane runs until a node waits for an unfinished one, and waits on it."""
    num_nodes = graph.num_nodes
    by_target = np.argsort(graph.targets, kind="stable")
    needs = graph.sources[by_target].tolist()
    latency = [0.0] * len(needs) if graph.latency is None else graph.latency[by_target].tolist()
    pointer = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(graph.targets, minlength=num_nodes), out=pointer[1:])
    bounds = pointer.tolist()
    cost = durations.tolist()
    start = [0.0] * num_nodes
    end = [-1.0] * num_nodes  # -1: not run yet (times are >= 0)
    waiters: list[list[int] | None] = [None] * num_nodes
    position = graph.lanes[:-1].tolist()
    stop = graph.lanes[1:].tolist()
    clock = [0.0] * len(position)
    ready = list(range(len(position) - 1, -1, -1))
    while ready:
        lane = ready.pop()
        node, last, now = position[lane], stop[lane], clock[lane]
        blocker = -1
        while node < last:
            for edge in range(bounds[node], bounds[node + 1]):
                done = end[needs[edge]]
                if done < 0:
                    blocker = needs[edge]
                    break
                done += latency[edge]
                now = max(now, done)
            if blocker >= 0:
                break
            start[node] = now
            now += cost[node]
            end[node] = now
            woken = waiters[node]
            if woken is not None:
                ready.extend(woken)
            node += 1
        position[lane], clock[lane] = node, now
        if blocker >= 0:
            if waiters[blocker] is None:
                waiters[blocker] = [lane]
            else:
                waiters[blocker].append(lane)  # type: ignore[union-attr]
    ran = np.asarray(end) >= 0
    if not ran.all():
        raise DependencyCycle(ran)
    return NodeTimes(start=np.asarray(start), end=np.asarray(end))


def _by_level(graph: TimingGraph, durations: np.ndarray) -> NodeTimes:
    """Any number of replicas at once: a level of nodes at a time, vectorised over nodes and replicas."""
    start = np.zeros_like(durations)
    end = durations.copy()
    spread = (slice(None),) + (None,) * (durations.ndim - 1)
    for level in graph.plan:
        if level.fed.size:
            arrivals = end[level.sources]
            if level.latency is not None:
                arrivals += level.latency[spread]
            begins = np.maximum.reduceat(arrivals, level.segments, axis=0)
            start[level.fed] = begins
            end[level.fed] = begins + durations[level.fed]
        if level.members is not None:
            latest = np.maximum.reduceat(start[level.members], level.group_starts, axis=0)
            if level.across_dp.any():
                assert durations.ndim >= 2, "a data-parallel group needs a replica axis"
                latest[level.across_dp] = latest[level.across_dp].max(axis=-1, keepdims=True)
            end[level.members] = np.repeat(latest, level.group_sizes, axis=0) + durations[level.members]
    return NodeTimes(start=start, end=end)
