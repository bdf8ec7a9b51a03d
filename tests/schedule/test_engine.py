"""The timing engine's rule on small hand-checked schedules, its errors, and its deadlock grid."""

from __future__ import annotations

import math

import polars as pl
import pytest

from tracekit.present.schedule import deadlock_grid
from tracekit.schedule.action import Action, Kind, OverlappedPair, parse_step
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import ScheduleDeadlock, simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.model import MicrobatchPath, Schedule, ScheduleError
from tracekit.schedule.registry import generate


def _schedule(
    *ranks: str, stages: int, microbatches: int, paths: tuple[MicrobatchPath, ...] = ()
) -> Schedule:
    steps = tuple(tuple(parse_step(text) for text in rank.split()) for rank in ranks)
    return Schedule("hand", len(ranks), stages, microbatches, steps, paths)


def test_start_is_later_of_rank_and_dependencies_plus_comm() -> None:
    # Two ranks, one micro-batch: F on rank 0, F then B on rank 1, B back on rank 0.
    schedule = _schedule("0F0 0B0", "1F0 1B0", stages=2, microbatches=1)
    costs = Costs(forward=(1.0, 2.0), backward_input=(3.0, 4.0), backward_weight=(0.5, 0.25), comm=0.1)

    frame = simulate(schedule, costs).to_frame()

    assert frame.select("rank", "stage", "kind", "start", "end").rows() == [
        (0, 0, "F", 0.0, 1.0),
        (0, 0, "B", pytest.approx(7.45), pytest.approx(10.95)),  # 1B0 (4 + 0.25) ends 7.35, + comm 0.1
        (1, 1, "F", pytest.approx(1.1), pytest.approx(3.1)),
        (1, 1, "B", pytest.approx(3.1), pytest.approx(7.35)),
    ]


def test_overlapped_pair_is_one_step_of_its_own_cost_and_waits_for_both_halves() -> None:
    schedule = _schedule(
        "0F0 0F1 (0F2;0B0)OVERLAP_F_B 0B1 0B2", "1F0 1B0 1F1 1B1 1F2 1B2", stages=2, microbatches=3
    )
    costs = Costs.uniform(2, 1.0, 1.0, 1.0, fb=2.5)

    frame = simulate(schedule, costs).to_frame()
    pair = frame.filter(frame["overlapped"])

    assert pair["kind"].to_list() == ["F", "B"]
    assert pair["start"].n_unique() == 1 and pair["end"].n_unique() == 1
    assert pair["end"][0] - pair["start"][0] == 2.5
    # the pair waits for 1B0, which ends at 1 (0F0) + 1 (1F0) + 2 (1B0 = b + w) = 4
    assert pair["start"][0] == 4.0


def test_per_stage_costs_drive_each_stage() -> None:
    schedule = generate("gpipe", 2, 2)
    costs = Costs(forward=(1.0, 5.0), backward_input=(1.0, 1.0), backward_weight=(0.0, 0.0))

    summary = summarize(simulate(schedule, costs))

    assert summary.ranks["busy"].to_list() == [4.0, 12.0]
    assert summary.makespan == 1 + 5 + 5 + 1 + 1 + 1  # 1F0, 1F1, 1B0, 1B1 on rank 1, then 0B1 on rank 0


def test_dualpipe_paths_start_where_their_direction_enters() -> None:
    schedule = generate("dualpipe", 2, 4)

    frame = simulate(schedule, Costs.uniform(4, 1.0, 1.0, 1.0)).to_frame()
    firsts = (
        frame.filter(pl.col("kind") == "F")
        .group_by("microbatch")
        .agg(pl.col("stage").min(), pl.col("start").min())
    )

    # micro-batches 2 and 3 enter at stage 2 on rank 1 without waiting for anything upstream
    assert sorted(firsts.filter(firsts["microbatch"] >= 2)["stage"].to_list()) == [2, 2]
    assert firsts.filter(firsts["microbatch"] == 2)["start"][0] == 0.0


def test_deadlock_is_reported_as_a_rank_by_step_grid() -> None:
    # rank 0 wants 0B0 before 0F1, rank 1 wants 1F1 before 1B0: B0 cannot come back, F1 cannot go on.
    schedule = _schedule("0F0 0B1 0F1 0B0", "1F0 1F1 1B0 1B1", stages=2, microbatches=2)

    with pytest.raises(ScheduleDeadlock) as caught:
        simulate(schedule, Costs.uniform(2, 1.0, 1.0, 1.0))

    assert "rank 0 at step 1 (0B1)" in str(caught.value)
    message = deadlock_grid(caught.value)
    assert "deadlocks" in message
    assert "rank 0  0F0" in message and "[0B1]" in message and "stuck at step 1" in message
    assert "[1F1]" in message


@pytest.mark.parametrize(
    ("ranks", "problem"),
    [
        (("0F0 0B0", "1F0"), "backward (B or I) runs 0 times"),
        (("0F0 0F0 0B0", "1F0 1B0"), "F runs 2 times"),
        (("0F0 0I0", "1F0 1B0"), "1 I but 0 W"),
    ],
)
def test_incomplete_schedules_are_refused(ranks: tuple[str, ...], problem: str) -> None:
    schedule = _schedule(*ranks, stages=2, microbatches=1)

    with pytest.raises(ScheduleError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        simulate(schedule, Costs.uniform(2, 1.0, 1.0, 1.0))


def test_unmeasured_cost_is_refused_when_needed() -> None:
    schedule = generate("zb-h1", 2, 2)
    costs = Costs(forward=(1.0, 1.0), backward_input=(1.0, math.nan), backward_weight=(1.0, 1.0))

    with pytest.raises(ScheduleError, match="no measured cost"):
        simulate(schedule, costs)


def test_costs_must_cover_the_stages() -> None:
    with pytest.raises(ScheduleError, match="cover 3 stages"):
        simulate(generate("1f1b", 2, 2), Costs.uniform(3, 1.0, 1.0, 1.0))


def test_negative_cost_is_refused() -> None:
    with pytest.raises(ScheduleError, match=">= 0"):
        Costs.uniform(2, -1.0, 1.0, 1.0)


def test_pairs_print_like_torch() -> None:
    pair = OverlappedPair(Action(0, Kind.FORWARD, 3), Action(7, Kind.FULL_BACKWARD, 1))

    assert str(pair) == "(0F3;7B1)OVERLAP_F_B"
