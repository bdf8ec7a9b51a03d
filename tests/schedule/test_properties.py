"""Invariants of every generated schedule's simulated timeline, over P, M and costs (hypothesis).

The oracle here restates the rule of docs/schedules.md in its own words, over the schedule's own
steps: it calls neither the engine's compiler nor ``tracekit.schedule.dependencies``, so a fault
in the generators, the rule or the engine breaks an invariant. It checks every action's start
exactly (the later of its rank's previous step and each input plus latency: dependencies respected
and no idle the rule does not force), each action's duration, completeness, and makespan bounds.
"""

from __future__ import annotations

from collections import Counter

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tracekit.schedule.action import Action, OverlappedPair
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import Timeline, simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.model import Schedule, ScheduleError
from tracekit.schedule.realized import schedule_from_realized
from tracekit.schedule.registry import GENERATORS, generate

_cost = st.floats(min_value=0.05, max_value=5.0, allow_nan=False)
_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Schedule, Costs]:
    name = draw(st.sampled_from(sorted(GENERATORS)))
    pp = draw(st.integers(1, 6))
    microbatches = draw(st.integers(1, 18))
    chunks = draw(st.integers(2, 3)) if name == "interleaved-1f1b" else None
    try:
        schedule = generate(name, pp, microbatches, chunks)
    except ScheduleError:
        assume(False)
    stages = schedule.num_stages
    per_stage = st.lists(_cost, min_size=stages, max_size=stages)
    costs = Costs(
        forward=draw(per_stage),
        backward_input=draw(per_stage),
        backward_weight=draw(per_stage),
        full_backward=draw(st.none() | per_stage),
        overlapped=draw(st.none() | per_stage),
        comm=draw(st.floats(min_value=0.0, max_value=2.0)),
    )
    return schedule, costs


def _action_cost(costs: Costs, action: Action) -> float:
    table = {"F": costs.forward, "I": costs.backward_input, "W": costs.backward_weight}
    if action.kind.value in table:
        return table[action.kind.value][action.stage]
    if costs.full_backward is not None:
        return costs.full_backward[action.stage]
    return costs.backward_input[action.stage] + costs.backward_weight[action.stage]


def _step_cost(costs: Costs, step: Action | OverlappedPair) -> float:
    if isinstance(step, OverlappedPair):
        if costs.overlapped is not None:
            return costs.overlapped[step.forward.stage]
        return _action_cost(costs, step.forward) + _action_cost(costs, step.backward)
    return _action_cost(costs, step)


def _where(schedule: Schedule) -> dict[tuple[int, str, int], tuple[int, int, Action | OverlappedPair]]:
    """(stage, kind, micro-batch) -> (rank, index of its step on the rank, the step)."""
    where = {}
    for rank, steps in enumerate(schedule.steps):
        for index, step in enumerate(steps):
            for action in step.halves if isinstance(step, OverlappedPair) else (step,):
                where[(action.stage, action.kind.value, action.microbatch)] = (rank, index, step)
    return where


def _inputs(action: Action, first: int, last: int, where: dict) -> list[tuple[int, str, int]]:
    """What ``action`` waits for, in the words of docs/schedules.md."""
    stage, kind, mb = action.stage, action.kind.value, action.microbatch
    if kind == "F":
        return [] if stage == first else [(stage - 1, "F", mb)]
    if kind == "W":
        return [(stage, "I", mb)]
    if stage == last:
        return [(stage, "F", mb)]  # the loss
    return [(stage + 1, "B", mb) if (stage + 1, "B", mb) in where else (stage + 1, "I", mb)]


def _node(timeline: Timeline, rank: int, index: int) -> int:
    return timeline.offsets[rank] + index


@_SETTINGS
@given(_cases())
def test_every_cell_on_a_path_runs_forward_once_and_its_backward_once(case: tuple[Schedule, Costs]) -> None:
    schedule, costs = case

    frame = simulate(schedule, costs).to_frame()

    runs = Counter(frame.select("stage", "microbatch", "kind").iter_rows())
    cells = {
        (stage, mb)
        for path in schedule.paths
        for stage in range(path.first_stage, path.last_stage + 1)
        for mb in range(path.first_microbatch, path.stop_microbatch)
    }
    assert {(stage, mb) for stage, mb, _ in runs} == cells
    for stage, mb in cells:
        assert runs[(stage, mb, "F")] == 1
        assert runs[(stage, mb, "B")] + runs[(stage, mb, "I")] == 1
        assert runs[(stage, mb, "W")] == runs[(stage, mb, "I")]


@_SETTINGS
@given(_cases())
def test_every_step_starts_exactly_when_its_rank_and_its_inputs_are_ready(case: tuple[Schedule, Costs]) -> None:
    schedule, costs = case

    timeline = simulate(schedule, costs)  # raises on deadlock: every generated schedule makes progress

    where = _where(schedule)
    first_of, last_of = schedule.path_bounds
    for rank, steps in enumerate(schedule.steps):
        for index, step in enumerate(steps):
            node = _node(timeline, rank, index)
            ready = timeline.end[node - 1] if index else 0.0
            for action in step.halves if isinstance(step, OverlappedPair) else (step,):
                mb = action.microbatch
                for needed in _inputs(action, first_of[mb], last_of[mb], where):
                    other_rank, other_index, _ = where[needed]
                    if (other_rank, other_index) == (rank, index):
                        continue  # the other half of the same overlapped pair
                    latency = costs.comm if other_rank != rank else 0.0
                    ready = max(ready, timeline.end[_node(timeline, other_rank, other_index)] + latency)
            assert timeline.start[node] == pytest.approx(ready, abs=1e-9), (rank, index, str(step))
            assert timeline.end[node] - timeline.start[node] == pytest.approx(_step_cost(costs, step), abs=1e-9)


@_SETTINGS
@given(_cases())
def test_makespan_lies_between_the_critical_path_bounds_and_idle_is_never_negative(
    case: tuple[Schedule, Costs],
) -> None:
    schedule, costs = case

    timeline = simulate(schedule, costs)
    summary = summarize(timeline)

    busy = [sum(_step_cost(costs, step) for step in steps) for steps in schedule.steps]
    assert summary.ranks["busy"].to_list() == pytest.approx(busy, abs=1e-9)
    assert all(idle >= -1e-9 for idle in summary.ranks["idle"])
    assert summary.makespan >= max(busy) - 1e-9
    # One micro-batch's chain: F down its path, the backward back up, then the first stage's W.
    where = _where(schedule)
    first_of, last_of = schedule.path_bounds
    for mb in range(schedule.num_microbatches):
        stages = range(first_of[mb], last_of[mb] + 1)
        chain = [(s, "F", mb) for s in stages]
        chain += [(s, "B", mb) if (s, "B", mb) in where else (s, "I", mb) for s in reversed(stages)]
        chain += [(first_of[mb], "W", mb)] if (first_of[mb], "W", mb) in where else []
        steps = [where[key] for key in chain]
        distinct = [step for i, step in enumerate(steps) if i == 0 or step[:2] != steps[i - 1][:2]]
        hops = sum(a[0] != b[0] for a, b in zip(distinct, distinct[1:]))
        bound = sum(_step_cost(costs, step) for _, _, step in distinct) + hops * costs.comm
        assert summary.makespan >= bound - 1e-9, mb
    nodes = sum(map(len, schedule.steps))
    assert summary.makespan <= sum(busy) + nodes * costs.comm + 1e-9


@settings(max_examples=60, deadline=None)
@given(_cases())
def test_a_timeline_read_back_as_a_realized_run_is_the_same_schedule(case: tuple[Schedule, Costs]) -> None:
    schedule, costs = case
    frame = simulate(schedule, costs).to_frame()
    realized = frame.with_columns(
        pl.lit(0, pl.Int32).alias("step"),
        (pl.col("start") * 1e6).round().cast(pl.Int64).alias("start_ns"),
        (pl.col("end") * 1e6).round().cast(pl.Int64).alias("end_ns"),
    ).sort("rank", "start_ns")

    replayed = schedule_from_realized(realized)

    assert replayed.steps == schedule.steps
    assert replayed.paths == schedule.paths
