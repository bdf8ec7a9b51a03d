"""The timing engine: replay a dependency graph with chosen durations, for many replicas at once.

Semantics (Lin et al., OSDI 2025, §4: the dependency model and its simulation):

- every op starts when all its predecessors have ended (at 0 when it has none: a replayed step
  starts at 0 and has no launch gaps);
- an op outside any sync group then runs for its duration;
- the members of a sync group all end ``duration`` after the *latest* member start (for DP
  collectives, the latest over every data-parallel replica of the same step): their duration is
  the transfer time, the waiting is what the replay derives.

Durations are an array ``(nodes, slots, dp)``: a slot is one independent replica along the step
axis, ``dp`` the data-parallel replicas that DP collectives synchronize. Units are the caller's.

Not for: building graphs or choosing durations (``tracekit.whatif.attribution``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.whatif.graph import DependencyGraph


@dataclass(frozen=True)
class Timeline:
    """Replayed start and end of every op on every replica, shaped like the durations."""

    start: np.ndarray
    end: np.ndarray


@dataclass(frozen=True)
class _Stage:
    members: tuple[int, ...]
    deps: tuple[np.ndarray, ...]
    grouped: bool
    across_dp: bool


def _plan(graph: DependencyGraph) -> tuple[_Stage, ...]:
    groups = {group.members: group for group in graph.groups}
    plan = []
    for members in graph.order:
        group = groups.get(members)
        plan.append(
            _Stage(
                members=members,
                deps=tuple(np.asarray(graph.deps[m], dtype=np.intp) for m in members),
                grouped=group is not None,
                across_dp=group is not None and group.across_dp,
            )
        )
    return tuple(plan)


class Replayer:
    """Replays one graph repeatedly (the plan is computed once)."""

    def __init__(self, graph: DependencyGraph) -> None:
        self.graph = graph
        self._plan = _plan(graph)

    def run(self, durations: np.ndarray) -> Timeline:
        """Start and end of every op when each runs for ``durations`` (shape ``(nodes, slots, dp)``)."""
        assert durations.ndim == 3 and durations.shape[0] == self.graph.size, durations.shape
        assert not np.isnan(durations).any(), "durations hold NaN"
        start = np.zeros_like(durations, dtype=np.float64)
        end = np.zeros_like(durations, dtype=np.float64)
        for stage in self._plan:
            for member, deps in zip(stage.members, stage.deps):
                if deps.size:
                    start[member] = end[deps].max(axis=0)
            if stage.grouped:
                latest = start[list(stage.members)].max(axis=0)
                if stage.across_dp:
                    latest = np.broadcast_to(latest.max(axis=1, keepdims=True), latest.shape)
                for member in stage.members:
                    end[member] = latest + durations[member]
            else:
                member = stage.members[0]
                end[member] = start[member] + durations[member]
        return Timeline(start=start, end=end)
