"""On a GPU-timed pipeline whose CPU launches run ahead of the kernels, every figure follows the kernels.

The traces are built from DeepSeek's published H800 trace: its real compute kernels (names and
durations) are laid out per action of a 4-rank 1F1B schedule, timed on the GPU by the schedule
simulator, with one rank's kernels three times slower. On the CPU every rank labels and launches
each action in a few microseconds, all ranks alike and long before the kernels run, as a real
CUDA job does: on the CPU clock nobody is slow, on the GPU clock rank 2 is.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest
from stragglers.gpu_runs import real_kernels

from tracekit.analysis.realized import Clock
from tracekit.run_analysis import analyse
from tracekit.schedule.action import flatten
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.registry import generate

RANKS = 4
MICROBATCHES = 8
STEPS = 3
SLOW_RANK = 2
SLOWDOWN = 3.0
KERNELS_PER_ACTION = {"F": 6, "B": 12}
STEP_GAP_US = 1_000_000
LAUNCH_US = 3
"""Each launch call takes 3 µs on the CPU; an action's label spans its launches only."""


def _trace(rank: int, kernels: list[tuple[str, int]]) -> dict:
    """One rank's Kineto document: CPU labels and launches up front, kernels where the GPU runs them."""
    schedule = generate("1f1b", RANKS, MICROBATCHES)
    block = {kind: sum(d for _, d in kernels[:count]) / 1000 for kind, count in KERNELS_PER_ACTION.items()}
    slow = [SLOWDOWN if stage == SLOW_RANK else 1.0 for stage in range(RANKS)]
    costs = Costs(
        forward=tuple(block["F"] * s for s in slow),
        backward_input=tuple(block["B"] * s / 2 for s in slow),
        backward_weight=tuple(block["B"] * s / 2 for s in slow),
        full_backward=tuple(block["B"] * s for s in slow),
    )
    timeline = simulate(schedule, costs).to_frame().filter(pl.col("rank") == rank).sort("start")
    events: list[dict] = []
    correlation = rank * 1_000_000
    for step in range(STEPS):
        base = step * STEP_GAP_US
        cpu = base + 10
        events.append({"ph": "X", "cat": "user_annotation", "name": f"tracekit:step#{step}", "pid": 1, "tid": 1,
                       "ts": base, "dur": STEP_GAP_US // 2})  # fmt: skip
        for action, row in zip(flatten(schedule.steps[rank]), timeline.iter_rows(named=True)):
            assert (action.stage, action.kind.value) == (row["stage"], row["kind"])
            count = KERNELS_PER_ACTION[row["kind"]]
            names = kernels[:count]
            events.append({"ph": "X", "cat": "user_annotation", "name": f"tracekit:{action}", "pid": 1,
                           "tid": 1, "ts": cpu, "dur": count * LAUNCH_US})  # fmt: skip
            # The GPU starts 2 ms after the step's first launch; the action's kernels fill its GPU span
            # in proportion to their real durations, back to back, on whole microseconds.
            start, end = base + 2_000 + row["start"] * 1000, base + 2_000 + row["end"] * 1000
            total, done = sum(d for _, d in names), 0
            for name, dur in names:
                correlation += 1
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                               "ts": cpu, "dur": LAUNCH_US - 1, "args": {"correlation": correlation}})  # fmt: skip
                first = round(start + (end - start) * done / total)
                done += dur
                last = round(start + (end - start) * done / total)
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": first,
                               "dur": last - first, "args": {"device": 0, "stream": 7, "correlation": correlation}})  # fmt: skip
                cpu += LAUNCH_US
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": RANKS},
        "host_name": "gpu-node",
        "traceEvents": events,
    }


@pytest.fixture(scope="module")
def gpu_run(deepseek_trace_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-rank GPU-timed 1F1B run of real kernels, rank 2's three times slower on the GPU only."""
    kernels = real_kernels(deepseek_trace_path)
    root = tmp_path_factory.mktemp("gpu-pipeline")
    for rank in range(RANKS):
        (root / f"rank{rank}.json").write_bytes(orjson.dumps(_trace(rank, kernels)))
    return root


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
