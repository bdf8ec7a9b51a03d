"""The example job stands for a user's job: it must not import the collector it is captured by."""

from __future__ import annotations

import subprocess
import sys

import pytest

from examples.pipeline_job import JobConfig, parse_args, stages_of_rank


@pytest.mark.parametrize(
    ("job", "imported"),
    [
        ("examples.pipeline_job", []),
        ("examples.megatron_job", []),
    ],
)
def test_example_jobs_import_no_collector_or_tracekit_code(job: str, imported: list[str]) -> None:
    code = f"import sys, {job}; print(sorted(m for m in sys.modules if m.startswith(('tracekit', 'collectors'))))"

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )

    assert done.stdout.strip() == str(imported)


@pytest.mark.parametrize(
    ("schedule", "stages"),
    [("1f1b", [2]), ("interleaved-1f1b", [2, 6]), ("zbv", [2, 5]), ("deepseek-dualpipe", [2, 5])],
)
def test_stages_of_rank_follow_each_schedule_layout(schedule: str, stages: list[int]) -> None:
    assert stages_of_rank(JobConfig(schedule, ranks=4, microbatches=8, steps=1), 2) == stages


@pytest.mark.parametrize(
    "argv",
    [
        ["--schedule", "deepseek-dualpipe", "--ranks", "3"],
        ["--schedule", "deepseek-dualpipe", "--microbatches", "6"],
        ["--schedule", "1f1b", "--slow-rank", "4"],
        ["--schedule", "1f1b", "--slow-ms", "-1"],
        ["--schedule", "1f1b", "--dp", "0"],
        ["--schedule", "1f1b", "--ranks", "4", "--dp", "2", "--slow-rank", "8"],
    ],
)
def test_invalid_jobs_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_a_data_parallel_job_runs_dp_times_the_pipeline_and_takes_global_ranks() -> None:
    config = parse_args(["--schedule", "1f1b", "--ranks", "4", "--dp", "2", "--slow-rank", "7"])

    assert (config.ranks, config.dp, config.world_size, config.slow_rank) == (4, 2, 8, 7)
