"""The timing engine for schedules: ``simulate`` replays a schedule's per-rank order with per-action costs.

Rule (docs/schedules.md): a step starts at the later of its rank's previous step's end and each
dependency's end, plus ``costs.comm`` when the dependency ran on another rank. The dependencies are
``tracekit.schedule.dependencies``' one rule (F needs the previous stage's F; the backward needs
the next stage's backward, or the loss; W needs I); an overlapped pair needs what both its halves
need and runs as one step. The schedule becomes arrays (one node per step, rank-major, each rank a
lane of ``tracekit.schedule.timing``) and the timing core replays it. When no rank can move, the
schedule deadlocks and ``ScheduleDeadlock`` says which steps are stuck (``tracekit.present`` draws
the grid around them).
Metrics live in ``metrics``, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.schedule import dependencies as rule
from tracekit.schedule.action import OverlappedPair
from tracekit.schedule.costs import Costs
from tracekit.schedule.model import Schedule, ScheduleError, missing_actions
from tracekit.schedule.timing import DependencyCycle, replay, timing_graph

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
    """No rank can run its next step: each waits on a step that never runs first.

    ``done[r]`` is how many of rank r's steps ran; ``tracekit.present.schedule.deadlock_grid``
    draws them as a rank-by-step grid.
    """

    def __init__(self, schedule: Schedule, done: list[int]) -> None:
        self.schedule = schedule
        self.done = tuple(done)
        stuck = ", ".join(
            f"rank {rank} at step {count} ({schedule.steps[rank][count]})"
            for rank, count in enumerate(done)
            if count < len(schedule.steps[rank])
        )
        super().__init__(f"{schedule.name} deadlocks: no rank can run its next step; stuck: {stuck}")


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
        halves = _halves(self.schedule)
        steps = np.diff(halves.offsets)
        rank_of_node = np.repeat(np.arange(steps.size, dtype=np.int32), steps)
        halves_of_node = np.bincount(halves.node, minlength=rank_of_node.size)
        kinds = pl.Series([kind.value for kind in rule.CODE_KIND], dtype=pl.String())
        return pl.DataFrame(
            {
                "rank": rank_of_node[halves.node],
                "stage": halves.stage,
                "kind": kinds.gather(halves.kind),
                "microbatch": halves.microbatch,
                "start": np.asarray(self.start)[halves.node],
                "end": np.asarray(self.end)[halves.node],
                "overlapped": halves_of_node[halves.node] == 2,
            },
        ).cast(TIMELINE_SCHEMA)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Halves:
    """Every action of a schedule as arrays, an overlapped pair's two halves on its one node."""

    node: np.ndarray
    kind: np.ndarray
    stage: np.ndarray
    microbatch: np.ndarray
    offsets: np.ndarray
    """Rank ``r``'s nodes are ``offsets[r] .. offsets[r + 1] - 1``."""


def _halves(schedule: Schedule) -> _Halves:
    steps = [step for rank_steps in schedule.steps for step in rank_steps]
    pair = np.fromiter((type(step) is OverlappedPair for step in steps), dtype=bool, count=len(steps))
    actions = [half for step in steps for half in (step.halves if type(step) is OverlappedPair else (step,))]
    count = len(actions)
    codes = rule.KIND_CODE
    return _Halves(
        node=np.repeat(np.arange(len(steps), dtype=np.int64), 1 + pair),
        kind=np.fromiter((codes[action.kind] for action in actions), dtype=np.int64, count=count),
        stage=np.fromiter((action.stage for action in actions), dtype=np.int64, count=count),
        microbatch=np.fromiter((action.microbatch for action in actions), dtype=np.int64, count=count),
        offsets=np.cumsum([0] + [len(rank_steps) for rank_steps in schedule.steps]),
    )


def _refuse(schedule: Schedule) -> None:
    problems = missing_actions(schedule)
    assert problems, "the fast completeness check and missing_actions disagree"
    raise ScheduleError(f"{schedule.name}: {len(problems)} problems: " + "; ".join(problems[:10]))


def _dependency_edges(schedule: Schedule, halves: _Halves) -> tuple[np.ndarray, np.ndarray]:
    """(producer node, consumer node) of every dependency; ScheduleError when actions are missing or repeated."""
    num_stages, num_mb = schedule.num_stages, schedule.num_microbatches
    stage, mb, kind = halves.stage, halves.microbatch, halves.kind
    first_of, last_of = (np.asarray(bound, dtype=np.int64) for bound in schedule.path_bounds)
    inside = mb < num_mb
    clipped = np.where(inside, mb, 0)
    first, last = first_of[clipped], last_of[clipped]
    if not (inside & (first <= stage) & (stage <= last)).all():
        _refuse(schedule)
    size = rule.NUM_SLOTS * num_stages * num_mb
    own = rule.slot_keys(rule.own_slots(kind), stage, mb, num_stages, num_mb)
    inputs = rule.is_input(kind)
    input_keys = rule.slot_keys(
        np.full(int(inputs.sum()), rule.INPUT_SLOT), stage[inputs], mb[inputs], num_stages, num_mb
    )
    filled = np.bincount(own, minlength=size).reshape(rule.NUM_SLOTS, -1)
    cells = sum(
        (p.last_stage - p.first_stage + 1) * (p.stop_microbatch - p.first_microbatch) for p in schedule.paths
    )
    complete = (
        filled.max() <= 1
        and filled[rule.FORWARD_SLOT].sum() == cells == filled[rule.BACKWARD_SLOT].sum()
        and filled[rule.WEIGHT_SLOT].sum() == input_keys.size
    )
    node_of_slot = np.full(size, -1, dtype=np.int64)
    node_of_slot[own] = halves.node
    node_of_slot[input_keys] = halves.node[inputs]
    slot, needed = rule.producers(kind, stage, first, last)
    keys = rule.slot_keys(slot, needed, mb, num_stages, num_mb)
    wanted = keys >= 0
    producer = node_of_slot[keys[wanted]]
    if not complete or (producer < 0).any():
        _refuse(schedule)
    consumer = halves.node[wanted]
    distinct = producer != consumer  # a pair's half waiting for its own other half runs with it
    return producer[distinct], consumer[distinct]


def _step_costs(schedule: Schedule, costs: Costs, halves: _Halves) -> np.ndarray:
    """Each node's cost: its action's, or an overlapped pair's as one chunk."""
    full = costs.full_backward or tuple(i + w for i, w in zip(costs.backward_input, costs.backward_weight))
    table = np.array([costs.forward, full, costs.backward_input, costs.backward_weight], dtype=np.float64)
    half_cost = table[halves.kind, halves.stage]
    first_half = np.flatnonzero(np.diff(halves.node, prepend=-1))
    cost = np.add.reduceat(half_cost, first_half) if half_cost.size else half_cost
    if costs.overlapped is not None:
        pairs = np.flatnonzero(np.diff(np.append(first_half, halves.node.size)) == 2)
        cost[pairs] = np.asarray(costs.overlapped)[halves.stage[first_half[pairs]]]
    if np.isnan(cost).any():
        steps = [step for rank_steps in schedule.steps for step in rank_steps]
        unmeasured = sorted({str(steps[node]) for node in np.flatnonzero(np.isnan(cost)).tolist()})
        raise ScheduleError(
            f"no measured cost for {len(unmeasured)} step(s), e.g. {', '.join(unmeasured[:5])}"
        )
    return cost


def simulate(schedule: Schedule, costs: Costs) -> Timeline:
    """Replay ``schedule`` with ``costs``; raises ScheduleDeadlock when it cannot finish."""
    if costs.num_stages != schedule.num_stages:
        raise ScheduleError(f"costs cover {costs.num_stages} stages, the schedule has {schedule.num_stages}")
    halves = _halves(schedule)
    producer, consumer = _dependency_edges(schedule, halves)
    cost = _step_costs(schedule, costs, halves)
    offsets = halves.offsets
    rank_of = np.repeat(np.arange(schedule.num_ranks), np.diff(offsets))
    latency = np.where(rank_of[producer] != rank_of[consumer], costs.comm, 0.0) if costs.comm else None
    graph = timing_graph(int(offsets[-1]), producer, consumer, latency, lanes=offsets)
    try:
        times = replay(graph, cost)
    except DependencyCycle as cycle:
        # in-rank edges make what ran a prefix of each rank's steps
        ran = [int(cycle.ran[offsets[r] : offsets[r + 1]].sum()) for r in range(schedule.num_ranks)]
        raise ScheduleDeadlock(schedule, ran) from None
    return Timeline(schedule, costs, times.start.tolist(), times.end.tolist(), offsets.tolist())
