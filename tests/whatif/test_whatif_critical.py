"""The critical path of a replayed step: a chain of waits from 0 to the step's end, through the slow rank."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from whatif.simulated_runs import simulated_actions

from tracekit.whatif.critical import critical_paths
from tracekit.whatif.pipeline import pipeline_case


@pytest.mark.parametrize("name", ["1f1b", "zbv", "dualpipev"])
def test_each_steps_path_runs_without_gaps_from_zero_to_the_step_time(name: str) -> None:
    case, _ = pipeline_case(simulated_actions(name, pp=4, steps=2), name)
    durations = case.ops["duration_ms"].to_numpy()

    paths = critical_paths(case, durations)

    step_times = case.replay_step_times(durations)
    for step, step_ms in zip(case.steps, step_times):
        path = paths.filter(pl.col("step") == step).sort("position")
        assert path["start_ms"][0] == 0.0 and path["via"][0] == "start"
        assert path["end_ms"][-1] == step_ms
        # No communication cost: each action starts the moment the one it waited for ends.
        np.testing.assert_array_equal(path["start_ms"][1:].to_numpy(), path["end_ms"][:-1].to_numpy())


def test_a_slow_ranks_actions_lie_on_the_path() -> None:
    case, _ = pipeline_case(simulated_actions("1f1b", pp=4, steps=1, slow_rank=2, factor=3.0), "1f1b")

    path = critical_paths(case, case.ops["duration_ms"].to_numpy())

    on_rank = path.group_by("rank").agg((pl.col("end_ms") - pl.col("start_ms")).sum().alias("ms"))
    assert on_rank.sort("ms", descending=True)["rank"][0] == 2
    assert set(path["via"].to_list()) == {"start", "rank", "transfer"}
