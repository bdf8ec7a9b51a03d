"""The pipeline dependency model: replaying a simulated schedule reproduces the simulator exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from whatif.simulated_runs import data_parallel_actions, simulated_actions

from tracekit.errors import TracekitError
from tracekit.run_analysis import analyse
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.registry import generate
from tracekit.whatif.attribution import what_if
from tracekit.analysis.dependencies import cross_rank_dependencies
from tracekit.schedule.action import flatten
from tracekit.whatif.commit_and_wait import commit_program
from tracekit.whatif.pipeline import COMMIT_AND_WAIT_CLASSES, pipeline_case

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SAMPLE_RUNS = (
    "gpipe", "1f1b", "interleaved-1f1b", "zbv", "dualpipev", "dualpipev-straggler", "deepseek-dualpipe",
)  # fmt: skip

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev", "dualpipe")


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(SCHEDULES),
    pp=st.sampled_from([2, 4]),
    microbatches=st.sampled_from([8, 12]),
    costs=st.tuples(*(st.floats(0.5, 5.0) for _ in range(3))),
)
def test_replay_with_real_durations_reproduces_the_simulated_step(name, pp, microbatches, costs) -> None:
    schedule = generate(name, pp, microbatches)
    f, i, w = costs
    timeline = simulate(schedule, Costs.uniform(schedule.num_stages, f, i, w))
    frame = (
        timeline.to_frame()
        .with_columns(
            pl.lit(0, pl.Int32()).alias("replica"),
            pl.lit(0, pl.Int32()).alias("step"),
            (pl.col("start") * 1e6).round().cast(pl.Int64()).alias("start_ns"),
            (pl.col("end") * 1e6).round().cast(pl.Int64()).alias("end_ns"),
        )
        .sort("rank", "start_ns")
    )

    case, warnings = pipeline_case(frame, name)
    replayed = case.replay_step_times(case.ops["duration_ms"].to_numpy())

    assert warnings == ()
    assert replayed[0] == pytest.approx(max(timeline.end), abs=1e-5)
    assert case.measured_ms()[0] == pytest.approx(max(timeline.end), abs=1e-5)
    # The simulator starts every op once it is ready: nothing waits between actions.
    assert np.abs(case.ops["gap_ms"].to_numpy()).max() == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("name", SAMPLE_RUNS)
def test_durations_and_gaps_replay_the_recorded_steps(name: str) -> None:
    case = analyse(SAMPLES / name).case
    occupied = np.maximum(case.ops["duration_ms"].to_numpy() + case.ops["gap_ms"].to_numpy(), 0.0)

    # Every op starts its gap after what it waits for and runs its duration: the capture again.
    assert case.replay_step_times(occupied) == pytest.approx(case.measured_ms(), abs=1e-6)
    # Without the gaps (transfers, host work between actions) the replay is faster than the run.
    assert (case.replay_step_times(case.ops["duration_ms"].to_numpy()) < case.measured_ms()).all()


@pytest.mark.parametrize(("name", "slow_rank"), [("1f1b", 1), ("1f1b", 2), ("dualpipev", 3), ("zbv", 0)])
def test_slow_rank_is_the_worst_worker_and_slowdown_grows_with_its_delay(name: str, slow_rank: int) -> None:
    slowdowns = []
    for factor in (1.0, 1.5, 2.5):
        result = what_if(pipeline_case(simulated_actions(name, slow_rank=slow_rank, factor=factor), name)[0])
        slowdowns.append(result.slowdown)
        if factor > 1:
            assert next(iter(result.by_rank)) == slow_rank

    assert slowdowns[0] == pytest.approx(1.0)
    assert slowdowns[0] < slowdowns[1] < slowdowns[2]


def test_ideal_replay_is_the_run_without_its_straggler() -> None:
    case, _ = pipeline_case(simulated_actions("1f1b", slow_rank=2, factor=2.0), "1f1b")

    result = what_if(case)

    clean = Costs.uniform(4, 2.0, 3.0, 0.0, full_b=3.0)  # every stage at the unslowed F = 2, B = 3 ms
    assert result.ideal_ms[0] == pytest.approx(max(simulate(generate("1f1b", 4, 8), clean).end))


def test_dualpipe_paths_give_every_dependency_a_producer() -> None:
    frame = simulated_actions("dualpipe")

    case, warnings = pipeline_case(frame, "dualpipe")

    assert warnings == ()
    assert cross_rank_dependencies(frame).height > 0
    assert set(case.ops["work"].unique().to_list()) >= {"first", "middle", "last"}


def test_missing_producers_are_reported_not_hidden() -> None:
    frame = simulated_actions("1f1b").filter(~((pl.col("rank") == 1) & (pl.col("kind") == "B")))

    _, warnings = pipeline_case(frame, "partial")

    assert len(warnings) == 1 and "dependencies wait for actions absent from the trace" in warnings[0]


def test_an_action_recorded_twice_is_refused() -> None:
    frame = simulated_actions("1f1b", steps=1)
    doubled = pl.concat([frame, frame.head(1).with_columns(pl.col("start_ns") + 1, pl.col("end_ns") + 1)])

    with pytest.raises(TracekitError, match="runs 2 times in step 0"):
        pipeline_case(doubled, "doubled")


def test_cross_rank_dependencies_run_forward_then_backward() -> None:
    deps = cross_rank_dependencies(simulated_actions("1f1b", steps=1))

    pairs = set(zip(deps["src_rank"].to_list(), deps["dst_rank"].to_list()))
    assert pairs == {(0, 1), (1, 2), (2, 3), (3, 2), (2, 1), (1, 0)}
    assert (deps["dst_start_ns"] >= deps["src_end_ns"]).all()
    assert np.unique(deps["step"].to_numpy()).tolist() == [0]


@pytest.mark.parametrize("name", ["1f1b", "zbv", "dualpipev"])
def test_dependencies_stay_within_a_replica_and_the_step_ends_with_the_last_replica(name: str) -> None:
    frame = data_parallel_actions(name, replicas=2, slow_replica=1, slow_rank=2, factor=2.0, steps=1)

    deps = cross_rank_dependencies(frame)
    case, warnings = pipeline_case(frame, name)

    replica_of = dict(zip(frame["rank"].to_list(), frame["replica"].to_list()))
    assert warnings == () and deps.height > 0
    assert all(replica_of[src] == replica_of[dst] == d for src, dst, d in deps.select("src_rank", "dst_rank", "replica").iter_rows())
    # Each replica's dependencies are those of one pipeline alone, renumbered.
    single = cross_rank_dependencies(simulated_actions(name, steps=1))
    assert deps.filter(pl.col("replica") == 0).height == single.height
    slow = case.replay_step_times(case.ops["duration_ms"].to_numpy())[0]
    alone, _ = pipeline_case(simulated_actions(name, slow_rank=2, factor=2.0, steps=1), name)
    assert slow == pytest.approx(alone.replay_step_times(alone.ops["duration_ms"].to_numpy())[0], abs=1e-6)
    assert sorted(case.ops["dp_rank"].unique().to_list()) == [0, 1]


def test_replicas_without_pipeline_groups_are_refused_with_the_option_named() -> None:
    frame = data_parallel_actions("1f1b", replicas=2, steps=1).with_columns(pl.lit(0, pl.Int32()).alias("replica"))

    with pytest.raises(TracekitError, match=r"runs 2 times in step 0 \(ranks 0, 4\).*--pipelines contiguous:P or strided:P"):
        pipeline_case(frame, "replicas")


def test_what_if_attributes_to_the_slow_replica_its_stage_and_worker() -> None:
    case, _ = pipeline_case(data_parallel_actions("1f1b", slow_replica=1, slow_rank=2, factor=2.0), "dp")

    result = what_if(case)

    assert next(iter(result.by_dp_rank)) == 1 and result.by_dp_rank[1] > result.by_dp_rank[0]
    assert next(iter(result.by_stage)) == 2 and next(iter(result.by_rank)) == 6
    assert result.by_dp_rank[1] == pytest.approx(result.slowdown)
    assert result.by_dp_rank[0] == pytest.approx(1.0)


@pytest.mark.parametrize("v_shaped", [False, True])
@pytest.mark.parametrize(("pp", "microbatches"), [(2, 4), (4, 8), (4, 12), (6, 12), (8, 20)])
def test_the_commit_program_runs_the_simulated_order_and_posts_each_transfer_once(
    v_shaped: bool, pp: int, microbatches: int
) -> None:
    programs = commit_program(pp, microbatches, v_shaped)
    schedule = generate("dualpipev" if v_shaped else "dualpipe", pp, microbatches)
    for rank, program in enumerate(programs):
        order = tuple(
            ("F" if a.kind.value == "F" else "W" if a.kind.value == "W" else "B", a.stage, a.microbatch)
            for a in flatten(schedule.steps[rank])
        )
        assert program.actions == order
        # A send is posted after its action ran, a receive no later than the commit before its action.
        assert all(at > program.actions.index(key) for key, at in program.sends.items())
        assert all(at <= program.actions.index(key) for key, at in program.receives.items())
    sent = sorted(key for program in programs for key in program.sends)
    received = sorted(key for program in programs for key in program.receives)
    assert len(sent) == len(set(sent)) and len(received) == len(set(received))
    assert len(sent) == len(received)


def test_a_send_held_past_the_next_action_makes_its_receiver_wait_for_that_action() -> None:
    # DualPipe on 4 ranks, 8 micro-batches: rank 0 queues F(0, mb 2)'s send only after its next
    # forward F(7, mb 4) (step 2, ``_send_forward(0)`` after ``_forward_chunk(1)``), and rank 1
    # posts that receive an action ahead, with F(6, mb 5). So rank 1's F(6, 5) waits for rank 0's
    # F(7, 4), and rank 0's next action, B(7, 4), for rank 1 to reach that commit (F(1, 1) ended).
    frame = simulated_actions("dualpipe", steps=1)
    with_waits, warnings = pipeline_case(frame, "dualpipe", "DualPipe")
    without, _ = pipeline_case(frame, "dualpipe")
    labels = with_waits.graph.labels
    edges = {(labels[a], labels[b]) for a, b in zip(with_waits.graph.sources, with_waits.graph.targets)}
    assert warnings == ()
    assert ("step 0 rank 0 7F4", "step 0 rank 1 6F5") in edges
    assert ("step 0 rank 1 1F1", "step 0 rank 0 7I4") in edges
    assert with_waits.graph.sources.size > without.graph.sources.size


def test_a_run_its_program_does_not_hold_replays_without_peer_waits_and_says_why() -> None:
    frame = simulated_actions("dualpipe", steps=1).filter(~((pl.col("rank") == 2) & (pl.col("kind") == "W")))
    case, warnings = pipeline_case(frame, "dualpipe", "DualPipe")
    assert any("replayed without DualPipe's peer waits: step 0 rank 2 did not run" in w for w in warnings)
    assert case.graph.sources.size == pipeline_case(frame, "dualpipe")[0].graph.sources.size


def test_deepseek_dualpipe_replays_its_peer_waits_and_still_reruns_the_recorded_steps() -> None:
    analysis = analyse(SAMPLES / "deepseek-dualpipe")
    assert analysis.schedule_class in COMMIT_AND_WAIT_CLASSES
    with_waits = analysis.case
    without, _ = pipeline_case(analysis.actions, "deepseek-dualpipe")
    assert with_waits.graph.sources.size > without.graph.sources.size
    # Every op still waits for at least what it did, so its gap to being ready is no larger; and
    # the recorded run kept every wait of the program: no op but a pair's started before it was ready.
    assert (with_waits.ops["gap_ms"].to_numpy() <= without.ops["gap_ms"].to_numpy() + 1e-9).all()
    assert with_waits.ops.filter((pl.col("gap_ms") < 0) & (pl.col("optype") != "F&B")).is_empty()
    occupied = np.maximum(with_waits.ops["duration_ms"].to_numpy() + with_waits.ops["gap_ms"].to_numpy(), 0.0)
    assert with_waits.replay_step_times(occupied) == pytest.approx(with_waits.measured_ms(), abs=1e-6)
    # torch's schedules wait for their own receives alone.
    assert analyse(SAMPLES / "dualpipev").schedule_class not in COMMIT_AND_WAIT_CLASSES
