"""Memory per rank on real captures of the example job, against the simulator and the planner's formula.

One capture per schedule (the collectors' session captures, plus a leak and a DualPipe of the same
model as the DualPipeV), read through ``RunAnalysis.memory`` as every command does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from collector_runs import Recorded, example_job, record

from tracekit.run_analysis import RunAnalysis, analyse
from tracekit.trace.run import load_run

pytestmark = pytest.mark.slow

SCHEDULES = ("1f1b", "interleaved-1f1b", "zbv", "dualpipev", "deepseek-dualpipe")
LEAK_RANK = 1


def _analysis(out_dir: Path) -> RunAnalysis:
    return analyse(out_dir, load=lambda root: load_run(root, workers=1))


@pytest.fixture(scope="module")
def extra_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, tuple[str, ...]], Recorded]:
    """``extra_run(key, extra_args)``: a capture of 1f1b or DualPipe with extra options, once per module."""
    runs: dict[str, Recorded] = {}

    def get(key: str, job: tuple[str, ...]) -> Recorded:
        if key not in runs:
            out_dir = tmp_path_factory.mktemp(f"memory-{key}")
            runs[key] = record(out_dir, example_job(*job), timeout_s=300)
            assert runs[key].exit_code == 0, runs[key].stderr[-3000:]
        return runs[key]

    return get


def _leak(extra_run: Callable[[str, tuple[str, ...]], Recorded]) -> Recorded:
    return extra_run("leak", ("1f1b", "--leak-activation-rank", str(LEAK_RANK)))


def test_1f1b_holds_4_3_2_1_microbatches_as_the_simulator(captured_run: Callable[[str], Recorded]) -> None:
    ranks = _analysis(captured_run("1f1b").out_dir).memory.ranks.sort("rank")
    assert ranks["peak_in_flight"].to_list() == [4.0, 3.0, 2.0, 1.0]
    assert ranks["simulated_peak_in_flight"].to_list() == [4.0, 3.0, 2.0, 1.0]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_in_flight_peaks_equal_the_simulated_ones(
    captured_run: Callable[[str], Recorded], schedule: str
) -> None:
    memory = _analysis(captured_run(schedule).out_dir).memory
    assert memory.recorded and memory.simulated is not None and memory.simulated.startswith("named")
    ranks = memory.ranks.sort("rank")
    assert ranks.height == 4
    assert ranks["peak_in_flight"].to_list() == ranks["simulated_peak_in_flight"].to_list()
    assert not ranks["holds_more_than_schedule"].any()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_each_peak_is_within_10_percent_of_its_prediction_or_names_the_part(
    captured_run: Callable[[str], Recorded], schedule: str
) -> None:
    ranks = _analysis(captured_run(schedule).out_dir).memory.ranks
    for row in ranks.iter_rows(named=True):
        assert row["predicted_bytes"] > 0
        within = abs(row["difference_pct"]) <= 10
        assert within == (row["differing_part"] is None), row
        if not within:
            assert row["finding"] and "differ most" in row["finding"], row


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_parts_add_up_to_the_peak(captured_run: Callable[[str], Recorded], schedule: str) -> None:
    steps = _analysis(captured_run(schedule).out_dir).memory.steps
    parts = ["param_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes", "kept_bytes", "rest_bytes"]
    assert (steps.select(pl.sum_horizontal(parts)).to_series() == steps["peak_bytes"]).all()
    assert (steps["activation_bytes"] >= 0).all() and (steps["peak_bytes"] > 0).all()


def test_sidecars_weigh_each_stage(captured_run: Callable[[str], Recorded]) -> None:
    meta = json.loads((captured_run("1f1b").out_dir / "rank0.meta.json").read_text())
    memory = meta["memory"]
    assert memory["profile_memory"] is True and memory["device"] == "cpu" and memory["capacity_bytes"] is None
    (stage,) = memory["stages"]
    hidden = 512  # the example job's default width: two Linear(512, 512) layers
    assert stage["params"] == 2 * (hidden * hidden + hidden)
    assert stage["param_bytes"] == 4 * stage["params"] == stage["grad_bytes"]
    assert stage["optimizer_bytes"] == 0  # plain SGD keeps no state


def test_a_dualpipe_rank_holds_twice_a_dualpipev_ranks_parameters(
    captured_run: Callable[[str], Recorded], extra_run: Callable[[str, tuple[str, ...]], Recorded]
) -> None:
    # The same 16-layer model: DualPipeV cuts it into 2P = 8 stages of 2 layers, DualPipe into P = 4
    # stages of 4 and runs each twice (one copy per direction).
    v = _analysis(captured_run("dualpipev").out_dir).memory.ranks.sort("rank")
    dual = _analysis(extra_run("dualpipe-same-model", ("deepseek-dualpipe", "--layers", "4")).out_dir)
    ranks = dual.memory.ranks.sort("rank")
    assert (ranks["param_bytes"] == 2 * v["param_bytes"]).all()


def test_the_leaking_rank_alone_holds_more_than_its_schedule_needs(
    extra_run: Callable[[str, tuple[str, ...]], Recorded],
) -> None:
    ranks = _analysis(_leak(extra_run).out_dir).memory.ranks.sort("rank")
    assert ranks.filter(pl.col("holds_more_than_schedule"))["rank"].to_list() == [LEAK_RANK]
    leaking = ranks.row(LEAK_RANK, named=True)
    assert "extra activation held" in leaking["finding"]
    assert ranks["peak_in_flight"].to_list() == [4.0, 3.0, 2.0, 1.0]  # the schedule itself did not change


def test_report_json_and_table_carry_the_memory_group(captured_run: Callable[[str], Recorded]) -> None:
    from tracekit.present.report import report_result

    result = report_result(_analysis(captured_run("1f1b").out_dir), "1f1b")
    memory = result.payload["memory"]
    assert memory["recorded"] and memory["unit"] == "bytes" and len(memory["ranks"]) == 4
    table = next(t for t in result.tables if t.name == "memory")
    assert {"peak_mib", "ideal_mib", "in_flight", "ideal_in_flight"} <= set(table.frame.columns)


def test_dashboard_draws_the_memory_section(captured_run: Callable[[str], Recorded]) -> None:
    from dashboards.build import build_page

    page = build_page(_analysis(captured_run("1f1b").out_dir))
    section = next(s for s in page.sections if s.key == "memory")
    assert [view.key for view in section.views] == ["memory"]
