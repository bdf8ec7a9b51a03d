"""Realized runs as schedules: real CPU captures (torch's schedules, DeepSeek's DualPipe) and frame handling."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.model import ScheduleError
from tracekit.schedule.realized import realized_costs, schedule_from_realized
from tracekit.schedule.registry import generate

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_TRACES = REPO_ROOT / "sample_traces"


def _capture(job_schedule: str, out: Path) -> Path:
    """sample_traces/<schedule> when committed, else a fresh 4-rank, 8 micro-batch CPU capture."""
    committed = SAMPLE_TRACES / job_schedule
    if (committed / "run.json").is_file():
        return committed
    record = "from tracekit.cli.main import main; main()"
    job = [
        "-m",
        "examples.pipeline_job",
        "--schedule",
        job_schedule,
        "--ranks",
        "4",
        "--microbatches",
        "8",
        "--steps",
        "2",
    ]
    subprocess.run(
        [sys.executable, "-c", record, "record", "--out", str(out), "--steps", "1:2", sys.executable, *job],
        check=True,
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("job_schedule", "name"),
    [
        ("gpipe", "gpipe"),
        ("1f1b", "1f1b"),
        ("interleaved-1f1b", "interleaved-1f1b"),
        ("zbv", "zbv"),
        ("dualpipev", "dualpipev"),
        ("deepseek-dualpipe", "dualpipe"),
    ],
)
def test_generated_order_is_the_captured_order(job_schedule: str, name: str, tmp_path: Path) -> None:
    from tracekit.run_analysis import realized_actions
    from tracekit.trace.run import load_run

    frame = realized_actions(load_run(_capture(job_schedule, tmp_path / job_schedule)))
    step = int(frame["step"].min())  # type: ignore[arg-type]
    realized = schedule_from_realized(frame, step=step)

    chunks = realized.num_stages // realized.num_ranks if name == "interleaved-1f1b" else None
    generated = generate(name, realized.num_ranks, realized.num_microbatches, chunks)

    assert realized.format() == generated.format()
    assert realized.paths == generated.paths


def _frame(schedule_name: str, pp: int, microbatches: int, steps: int = 1) -> pl.DataFrame:
    """A realized-actions frame made from a simulated timeline (ms -> ns), ``steps`` copies."""
    schedule = generate(schedule_name, pp, microbatches)
    costs = Costs.uniform(schedule.num_stages, 1.0, 2.0, 0.5, fb=3.0)
    base = simulate(schedule, costs).to_frame()
    return pl.concat(
        base.with_columns(
            pl.lit(step, pl.Int32).alias("step"),
            ((pl.col("start") + 100 * step) * 1e6).cast(pl.Int64).alias("start_ns"),
            ((pl.col("end") + 100 * step) * 1e6).cast(pl.Int64).alias("end_ns"),
        )
        for step in range(steps)
    ).sort("rank", "start_ns")


def test_replaying_a_realized_step_with_ideal_costs() -> None:
    frame = _frame("dualpipe", 4, 8, steps=2)

    schedule = schedule_from_realized(frame, step=1)
    timeline = simulate(schedule, Costs.uniform(schedule.num_stages, 1.0, 1.0, 1.0))

    assert schedule.steps == generate("dualpipe", 4, 8).steps
    assert max(timeline.end) > 0


def test_realized_costs_are_medians_in_ms() -> None:
    costs = realized_costs(_frame("dualpipe", 4, 8))

    assert costs.forward == pytest.approx((1.0,) * 8)
    assert costs.backward_input == pytest.approx((2.0,) * 8)
    assert costs.backward_weight == pytest.approx((0.5,) * 8)
    assert costs.full_backward == pytest.approx((2.5,) * 8)
    assert costs.overlapped == pytest.approx((3.0,) * 8)


def test_unmeasured_kinds_stay_unmeasured() -> None:
    costs = realized_costs(_frame("1f1b", 2, 4))

    assert costs.full_backward == pytest.approx((2.5, 2.5))
    assert all(math.isnan(value) for value in costs.backward_input)  # 1F1B never runs I
    assert costs.overlapped is None
    with pytest.raises(ScheduleError, match="no measured cost"):
        simulate(generate("zb-h1", 2, 4), costs)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.drop("overlapped"), "lack column 'overlapped'"),
        (lambda f: f.with_columns(pl.col("stage").cast(pl.Int64)), "column 'stage' is Int64"),
        (lambda f: f.filter(~((pl.col("kind") == "W") & (pl.col("rank") == 0))), "I but 0 W"),
        (
            lambda f: f.with_columns(
                pl.when(pl.col("overlapped") & (pl.col("kind") == "B"))
                .then(False)
                .otherwise(pl.col("overlapped"))
                .alias("overlapped")
            ),
            "no partner",
        ),
        (lambda f: f.filter(pl.col("rank") != 1), "not 0..2"),
    ],
)
def test_bad_realized_frames_are_refused(change, message: str) -> None:
    frame = change(_frame("dualpipe", 4, 8))

    with pytest.raises(ScheduleError, match=message):
        schedule_from_realized(frame)


def test_several_steps_need_a_choice() -> None:
    with pytest.raises(ScheduleError, match="choose one"):
        schedule_from_realized(_frame("1f1b", 2, 2, steps=2))
