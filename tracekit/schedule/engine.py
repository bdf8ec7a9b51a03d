"""The timing engine: replays a schedule's per-rank order with per-action costs.

Rule (docs/schedules.md): a step starts at the later of its rank's previous step's end and each
dependency's end, plus ``costs.comm`` when the dependency ran on another rank. Dependencies,
from the stage numbering (along micro-batch m's path stage ``s`` feeds ``s + 1``): F(s, m) needs
F(s-1, m) unless s is the path's first stage; the backward (B or I) of (s, m) needs the backward
of (s+1, m), or F(s, m) on the path's last stage (the loss); W(s, m) needs I(s, m). An overlapped
pair needs what both its halves need and runs as one step.

The schedule is compiled to flat integer arrays (one node per step, rank-major), then each rank
runs until it meets an unfinished dependency and waits on it; finishing a node wakes its
waiters. When no rank can move, the schedule deadlocks and ``ScheduleDeadlock`` shows a
rank-by-step grid around the stuck steps. Metrics live in ``metrics``, not here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from tracekit.schedule.action import Action, Kind, OverlappedPair
from tracekit.schedule.costs import Costs
from tracekit.schedule.model import Schedule, ScheduleError, missing_actions

TIMELINE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "microbatch": pl.Int32(),
    "start": pl.Float64(),
    "end": pl.Float64(),
    "overlapped": pl.Boolean(),
}
"""One row per action; ``start``/``end`` in the costs' unit; an F&B pair is two rows with one span."""


class ScheduleDeadlock(ScheduleError):
    """No rank can run its next step: each waits on a step that never runs first."""


@dataclass(frozen=True)
class Timeline:
    """When each step of a schedule ran: ``start[node]``, ``end[node]``, nodes rank-major."""

    schedule: Schedule
    costs: Costs
    start: list[float]
    end: list[float]
    offsets: list[int]
    """Rank ``r``'s nodes are ``offsets[r] .. offsets[r + 1] - 1``, in its step order."""

    def to_frame(self) -> pl.DataFrame:
        """One row per action (TIMELINE_SCHEMA), sorted by rank then start."""
        columns: dict[str, list] = {name: [] for name in TIMELINE_SCHEMA}
        for rank, steps in enumerate(self.schedule.steps):
            for index, step in enumerate(steps):
                node = self.offsets[rank] + index
                pair = isinstance(step, OverlappedPair)
                for action in step.halves if pair else (step,):
                    columns["rank"].append(rank)
                    columns["stage"].append(action.stage)
                    columns["kind"].append(action.kind.value)
                    columns["microbatch"].append(action.microbatch)
                    columns["start"].append(self.start[node])
                    columns["end"].append(self.end[node])
                    columns["overlapped"].append(pair)
        return pl.DataFrame(columns, schema=TIMELINE_SCHEMA)


@dataclass(frozen=True)
class _Program:
    """A schedule compiled to arrays: per node its cost and up to two dependencies with latency."""

    order: list[range]
    cost: list[float]
    dep_a: list[int]
    lat_a: list[float]
    dep_b: list[int]
    lat_b: list[float]


def _compile(schedule: Schedule, costs: Costs) -> _Program:
    """Number the steps rank-major and resolve each one's dependencies to node numbers.

    Each (slot, stage, micro-batch) has a key ``(slot * stages + stage) * micro-batches + mb`` into
    ``node_of_slot``; slots are F, the backward (B or I), W, and I alone (what a W waits for).
    """
    num_stages, num_mb = schedule.num_stages, schedule.num_microbatches
    if costs.num_stages != num_stages:
        raise ScheduleError(f"costs cover {costs.num_stages} stages, the schedule has {num_stages}")
    per_kind = {
        Kind.FORWARD: costs.forward,
        Kind.BACKWARD_INPUT: costs.backward_input,
        Kind.BACKWARD_WEIGHT: costs.backward_weight,
        Kind.FULL_BACKWARD: costs.full_backward
        or tuple(i + w for i, w in zip(costs.backward_input, costs.backward_weight)),
    }
    forward_kind, input_kind = Kind.FORWARD, Kind.BACKWARD_INPUT
    slot_size = num_stages * num_mb
    input_base = 3 * slot_size
    node_of_slot = [-1] * (4 * slot_size + 1)  # the extra -1 answers key -1 ("no dependency")
    first_of, last_of = schedule.path_bounds
    rank_of: list[int] = []
    cost: list[float] = []
    keys_a: list[int] = []
    keys_b: list[int] = []
    order: list[range] = []
    duplicates = off_path = 0
    node = 0

    def place(action: Action) -> int:
        """Claim ``action``'s slot for ``node``; return the key of what it waits for (-1: nothing)."""
        nonlocal duplicates, off_path
        stage, mb, kind = action.stage, action.microbatch, action.kind
        if mb >= num_mb or not first_of[mb] <= stage <= last_of[mb]:
            off_path += 1
            return -1
        cell = stage * num_mb + mb
        if kind is forward_kind:
            own, dep = cell, (cell - num_mb if stage > first_of[mb] else -1)
        elif kind is Kind.BACKWARD_WEIGHT:
            own, dep = 2 * slot_size + cell, input_base + cell
        else:
            own, dep = slot_size + cell, (slot_size + cell + num_mb if stage < last_of[mb] else cell)
            if kind is input_kind:
                node_of_slot[input_base + cell] = node
        duplicates += node_of_slot[own] >= 0
        node_of_slot[own] = node
        return dep

    for rank, steps in enumerate(schedule.steps):
        first = node
        for step in steps:
            if isinstance(step, OverlappedPair):
                keys_a.append(place(step.forward))
                keys_b.append(place(step.backward))
                if costs.overlapped is not None:
                    cost.append(costs.overlapped[step.forward.stage])
                else:
                    forward, backward = step.forward, step.backward
                    cost.append(
                        per_kind[forward.kind][forward.stage] + per_kind[backward.kind][backward.stage]
                    )
            else:
                keys_a.append(place(step))
                keys_b.append(-1)
                cost.append(per_kind[step.kind][step.stage])
            rank_of.append(rank)
            node += 1
        order.append(range(first, node))

    dep_a = [node_of_slot[key] for key in keys_a]
    dep_b = [node_of_slot[key] for key in keys_b]
    cells = sum(
        (p.last_stage - p.first_stage + 1) * (p.stop_microbatch - p.first_microbatch) for p in schedule.paths
    )
    filled = [slot_size - node_of_slot[k * slot_size : (k + 1) * slot_size].count(-1) for k in range(4)]
    unresolved = sum(1 for key, dep in zip(keys_a + keys_b, dep_a + dep_b) if dep < 0 <= key)
    if duplicates or off_path or unresolved or filled[:2] != [cells, cells] or filled[2] != filled[3]:
        problems = missing_actions(schedule)
        assert problems, "the fast completeness check and missing_actions disagree"
        raise ScheduleError(f"{schedule.name}: {len(problems)} problems: " + "; ".join(problems[:10]))
    if math.isnan(math.fsum(cost)):
        unmeasured = sorted(
            {str(step) for steps in schedule.steps for step in steps if math.isnan(costs.step(step))}
        )
        raise ScheduleError(
            f"no measured cost for {len(unmeasured)} step(s), e.g. {', '.join(unmeasured[:5])}"
        )
    comm = costs.comm
    # latency for a missing dependency (-1) is never read: the engine adds it only to real ones
    lat_a = [comm if rank_of[dep] != rank else 0.0 for dep, rank in zip(dep_a, rank_of)]
    lat_b = [comm if rank_of[dep] != rank else 0.0 for dep, rank in zip(dep_b, rank_of)]
    return _Program(order, cost, dep_a, lat_a, dep_b, lat_b)


def simulate(schedule: Schedule, costs: Costs) -> Timeline:
    """Replay ``schedule`` with ``costs``; raises ScheduleDeadlock when it cannot finish."""
    program = _compile(schedule, costs)
    cost, dep_a, lat_a, dep_b, lat_b = (
        program.cost,
        program.dep_a,
        program.lat_a,
        program.dep_b,
        program.lat_b,
    )
    num_nodes = len(cost)
    start = [0.0] * num_nodes
    end = [-1.0] * num_nodes
    waiters: list[list[int] | None] = [None] * num_nodes
    position = [rng.start for rng in program.order]
    stop = [rng.stop for rng in program.order]
    clock = [0.0] * schedule.num_ranks
    ready = list(range(schedule.num_ranks - 1, -1, -1))
    while ready:
        rank = ready.pop()
        node, last, t = position[rank], stop[rank], clock[rank]
        while node < last:
            dep = dep_a[node]
            if dep >= 0:
                done = end[dep]
                if done < 0:
                    break
                done += lat_a[node]
                t = max(t, done)
            dep = dep_b[node]
            if dep >= 0:
                done = end[dep]
                if done < 0:
                    break
                done += lat_b[node]
                t = max(t, done)
            start[node] = t
            t += cost[node]
            end[node] = t
            woken = waiters[node]
            if woken is not None:
                ready.extend(woken)
            node += 1
        position[rank], clock[rank] = node, t
        if node < last:
            blocker = dep_a[node] if dep_a[node] >= 0 and end[dep_a[node]] < 0 else dep_b[node]
            if waiters[blocker] is None:
                waiters[blocker] = [rank]
            else:
                waiters[blocker].append(rank)  # type: ignore[union-attr]
    stuck = [rank for rank in range(schedule.num_ranks) if position[rank] < stop[rank]]
    if stuck:
        offsets = [rng.start for rng in program.order]
        raise ScheduleDeadlock(
            _deadlock_report(schedule, [position[r] - offsets[r] for r in range(schedule.num_ranks)])
        )
    return Timeline(schedule, costs, start, end, [rng.start for rng in program.order] + [num_nodes])


def _deadlock_report(schedule: Schedule, done: list[int], before: int = 4, after: int = 2) -> str:
    """A rank-by-step grid around the first stuck step of each rank: ``[x]`` marks it, ``.`` not run."""
    stuck = [d for rank, d in enumerate(done) if d < len(schedule.steps[rank])]
    low = max(0, min(stuck) - before)
    high = max(stuck) + after + 1
    width = max(len(str(step)) for steps in schedule.steps for step in steps[low:high]) + 3
    header = "step".ljust(8) + "".join(str(i).ljust(width) for i in range(low, high))
    lines = [header]
    for rank, steps in enumerate(schedule.steps):
        cells = []
        for i in range(low, min(high, len(steps))):
            text = str(steps[i])
            cells.append(
                (f"[{text}]" if i == done[rank] else text if i < done[rank] else f".{text}").ljust(width)
            )
        state = "done" if done[rank] >= len(steps) else f"stuck at step {done[rank]}"
        lines.append(f"rank {rank}".ljust(8) + "".join(cells) + f"({state})")
    return (
        f"{schedule.name} deadlocks: no rank can run its next step "
        "([x] = stuck step, . = not run, plain = done)\n" + "\n".join(lines)
    )
