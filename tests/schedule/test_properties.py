"""Invariants of every generated schedule and its simulated timeline, over P, M and costs (hypothesis)."""

from __future__ import annotations

import polars as pl
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import Timeline, simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.model import Schedule, ScheduleError, missing_actions
from tracekit.schedule.realized import schedule_from_realized
from tracekit.schedule.registry import GENERATORS, generate

_cost = st.floats(min_value=0.05, max_value=5.0, allow_nan=False)


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
        overlapped=draw(st.none() | per_stage),
        comm=draw(st.floats(min_value=0.0, max_value=2.0)),
    )
    return schedule, costs


def _check_dependencies(schedule: Schedule, timeline: Timeline, frame: pl.DataFrame) -> None:
    where = {
        (s, k, m): (r, start, end)
        for r, s, k, m, start, end in frame.select(
            "rank", "stage", "kind", "microbatch", "start", "end"
        ).iter_rows()
    }
    first_of, last_of = schedule.path_bounds
    comm = timeline.costs.comm
    for (stage, kind, mb), (rank, start, _) in where.items():
        if kind == "F":
            needs = [(stage - 1, "F", mb)] if stage > first_of[mb] else []
        elif kind in "BI":
            below = (stage + 1, "B", mb) if (stage + 1, "B", mb) in where else (stage + 1, "I", mb)
            needs = [below] if stage < last_of[mb] else [(stage, "F", mb)]
        else:
            needs = [(stage, "I", mb)]
        for need in needs:
            other_rank, _, other_end = where[need]
            latency = comm if other_rank != rank else 0.0
            assert start >= other_end + latency - 1e-9, (stage, kind, mb, need)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_simulated_schedules_keep_their_invariants(case: tuple[Schedule, Costs]) -> None:
    schedule, costs = case

    timeline = simulate(schedule, costs)  # raises on deadlock: every generated schedule must finish
    frame = timeline.to_frame()
    summary = summarize(timeline)

    assert missing_actions(schedule) == []
    assert frame.height == schedule.num_actions
    _check_dependencies(schedule, timeline, frame)
    for rank_rows in frame.sort("rank", "start", "end").partition_by("rank"):
        starts, ends, pairs = (
            rank_rows["start"].to_list(),
            rank_rows["end"].to_list(),
            rank_rows["overlapped"].to_list(),
        )
        for i in range(1, len(starts)):
            same_pair = pairs[i] and pairs[i - 1] and starts[i] == starts[i - 1] and ends[i] == ends[i - 1]
            assert same_pair or starts[i] >= ends[i - 1] - 1e-9
    assert all(summary.makespan >= busy - 1e-9 for busy in summary.ranks["busy"])
    assert all(idle >= -1e-9 for idle in summary.ranks["idle"])


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
