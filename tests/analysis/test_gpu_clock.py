"""On a GPU-timed pipeline whose CPU launches run ahead of the kernels, every figure follows the kernels.

The traces are built from DeepSeek's published H800 trace: its real compute kernels (names and
durations) are laid out per action of a 4-rank 1F1B schedule, timed on the GPU by the schedule
simulator, with one rank's kernels three times slower. On the CPU every rank labels and launches
each action in a few microseconds, all ranks alike and long before the kernels run, as a real
CUDA job does: on the CPU clock nobody is slow, on the GPU clock rank 2 is.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from stragglers.gpu_runs import SLOWDOWN as SLOWDOWN_BY
from stragglers.gpu_runs import real_kernels, write_gpu_run

from tracekit.analysis.realized import Clock
from tracekit.run_analysis import analyse

SLOW_RANK = 2
SLOWDOWN = SLOWDOWN_BY["kernels"]


@pytest.fixture(scope="module")
def gpu_run(deepseek_trace_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-rank GPU-timed 1F1B run of real kernels, rank 2's three times slower on the GPU only."""
    return write_gpu_run(
        tmp_path_factory.mktemp("gpu-pipeline"), real_kernels(deepseek_trace_path), SLOW_RANK, "kernels"
    )


@pytest.fixture(scope="module")
def deepseek_trace_path(shared: Path) -> Path:
    return shared / "traces" / "deepseek-v3-dualpipe-chunk" / "train.json.gz"


def test_the_cpu_labels_show_no_straggler(gpu_run: Path) -> None:
    analysis = analyse(gpu_run)
    labelled = analysis.labelled.actions.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))

    per_rank = labelled.group_by("rank").agg(pl.col("dur_ns").median()).sort("rank")["dur_ns"].to_list()

    assert len(set(per_rank)) == 1  # the launch spans are alike on every rank


def test_actions_are_timed_on_the_gpu_clock(gpu_run: Path) -> None:
    analysis = analyse(gpu_run)

    actions = analysis.actions.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    forward = actions.filter(pl.col("kind") == "F").group_by("rank").agg(pl.col("dur_ns").median())
    medians = dict(forward.iter_rows())

    key = ["rank", "step", "stage", "kind", "microbatch"]
    launched = analysis.labelled.actions.join(analysis.actions, on=key, suffix="_gpu")

    assert analysis.clock is Clock.GPU
    assert medians[SLOW_RANK] == pytest.approx(SLOWDOWN * medians[1], rel=0.01)
    assert launched.height == analysis.actions.height
    assert (
        launched["start_ns_gpu"] - launched["start_ns"] > 1_900_000
    ).all()  # kernels run well after launch


def test_stragglers_follow_the_kernels_not_the_launches(gpu_run: Path) -> None:
    analysis = analyse(gpu_run)

    flagged = analysis.stragglers.flagged

    assert set(flagged["rank"].to_list()) == {SLOW_RANK}


def test_whatif_follows_the_kernels_not_the_launches(gpu_run: Path) -> None:
    analysis = analyse(gpu_run)

    result = analysis.whatif

    assert next(iter(result.by_rank)) == SLOW_RANK
    assert result.slowdown > 1.5
    # The replay of the kernels' own durations reproduces the GPU step exactly: no launch time in it.
    assert result.realized_ms == pytest.approx(result.measured_ms, rel=1e-6)
