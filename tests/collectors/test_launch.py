"""End to end: ``tracekit record`` around real multi-process pipeline jobs on CPU.

The realized order of every rank (read back from the trace labels by tracekit's own reader) must
equal what the engine plans: torch's schedule IR, or DeepSeek's ``DualPipe.step`` replayed with its
compute recorded (tests/schedule/reference_orders.py).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from collector_runs import MICROBATCHES, RANKS, TRACEKIT, Recorded, example_job, record
from schedule.reference_orders import deepseek_dualpipe_order, torch_order

from collectors.launch import capture_env
from tracekit.run_analysis import realized_actions
from tracekit.schedule.action import flatten, parse_step
from tracekit.trace.run import load_run

pytestmark = pytest.mark.slow


def _torch_1f1b_runtime_order(rank: int, ranks: int, microbatches: int) -> list[str]:
    """Schedule1F1B._step_microbatches' order: min(M, P - r) forwards, then B/F pairs, then Bs.

    torch's own IR for 1F1B (``_get_pipeline_order``) numbers the last rank's forwards from 1 (F1..F8
    for 8 micro-batches), so it cannot serve as the reference for that rank.
    """
    warmup = min(microbatches, ranks - rank)
    order = [f"{rank}F{mb}" for mb in range(warmup)]
    for mb in range(microbatches):
        order.append(f"{rank}B{mb}")
        if warmup + mb < microbatches:
            order.append(f"{rank}F{warmup + mb}")
    return order


PLANNED: dict[str, Callable[[], list[list[str]]]] = {
    "1f1b": lambda: [_torch_1f1b_runtime_order(rank, RANKS, MICROBATCHES) for rank in range(RANKS)],
    "dualpipev": lambda: torch_order("DualPipeV", RANKS, MICROBATCHES, 2),
    "deepseek-dualpipe": lambda: deepseek_dualpipe_order(RANKS, MICROBATCHES),
}
"""Captured schedule -> planned per-rank order (pairs included, as text)."""

NAMES = {"1f1b": "1f1b", "dualpipev": "dualpipev", "deepseek-dualpipe": "dualpipe"}
"""Example job's --schedule -> the manifest's normalized name (tracekit.schedule.registry's names)."""

STAGES: dict[str, dict[str, list[int]]] = {
    "1f1b": {str(rank): [rank] for rank in range(RANKS)},
    "dualpipev": {str(rank): [rank, 2 * RANKS - 1 - rank] for rank in range(RANKS)},
    "deepseek-dualpipe": {str(rank): [rank, 2 * RANKS - 1 - rank] for rank in range(RANKS)},
}


CELLS = {"1f1b": RANKS * MICROBATCHES, "dualpipev": 2 * RANKS * MICROBATCHES, "deepseek-dualpipe": RANKS * MICROBATCHES}
"""(stage, micro-batch) cells per step: DualPipeV runs every micro-batch through 2P stages; DualPipe
runs half of them through each direction's P stages."""


def _actions(run: Recorded) -> pl.DataFrame:
    return realized_actions(load_run(run.out_dir, workers=1))


def _manifest(out_dir: Path) -> dict:
    return json.loads((out_dir / "run.json").read_text())


@pytest.mark.parametrize("schedule", sorted(PLANNED))
def test_record_writes_one_complete_trace_per_rank(
    captured_run: Callable[[str], Recorded], schedule: str
) -> None:
    run = captured_run(schedule)

    manifest = _manifest(run.out_dir)

    assert manifest["complete"] and manifest["world_size"] == RANKS and manifest["exit_code"] == 0
    assert manifest["schedule"]["name"] == NAMES[schedule] and manifest["microbatches"] == MICROBATCHES
    assert manifest["rank_to_stages"] == STAGES[schedule]
    assert manifest["pipeline_groups"] == [list(range(RANKS))]  # one pipeline: the default group
    assert manifest["steps"]["requested"] == [1, 3] and manifest["steps"]["captured"] == [1, 3]
    for rank, entry in enumerate(manifest["ranks"]):
        assert (entry["rank"], entry["complete"], entry["trace"]) == (rank, True, f"rank{rank}.json.gz")
        trace = json.loads(gzip.decompress((run.out_dir / entry["trace"]).read_bytes()))
        assert trace["distributedInfo"]["rank"] == rank and trace["traceEvents"]
    assert sorted(path.name for path in run.out_dir.glob("rank*.json.gz")) == [
        f"rank{rank}.json.gz" for rank in range(RANKS)
    ]


@pytest.mark.parametrize("schedule", sorted(PLANNED))
def test_realized_order_equals_the_planned_order(
    captured_run: Callable[[str], Recorded], schedule: str
) -> None:
    planned = [
        [str(action) for action in flatten([parse_step(text) for text in rank])]
        for rank in PLANNED[schedule]()
    ]

    actions = _actions(captured_run(schedule))

    assert sorted(actions["step"].unique().to_list()) == [0, 1]
    for (rank, step), rows in actions.group_by("rank", "step", maintain_order=True):
        realized = [
            f"{stage}{kind}{mb}" for stage, kind, mb in rows.select("stage", "kind", "microbatch").iter_rows()
        ]
        assert realized == planned[rank], f"rank {rank}, step {step}"


@pytest.mark.parametrize("schedule", sorted(PLANNED))
def test_each_stage_and_microbatch_runs_forward_and_backward_once(
    captured_run: Callable[[str], Recorded], schedule: str
) -> None:
    run = captured_run(schedule)
    paths = _manifest(run.out_dir)["schedule"]["paths"]
    on_a_path = {
        (stage, mb)
        for path in paths
        for stage in range(path["first_stage"], path["last_stage"] + 1)
        for mb in range(path["first_microbatch"], path["stop_microbatch"])
    }

    runs = (
        _actions(run)
        .sort("start_ns")
        .group_by("step", "stage", "microbatch")
        .agg(pl.col("kind").str.join(""))
    )

    assert len(on_a_path) == CELLS[schedule]
    assert runs.height == 2 * len(on_a_path)  # two steps, each (stage, micro-batch) once per step
    for step in (0, 1):
        assert set(runs.filter(pl.col("step") == step).select("stage", "microbatch").iter_rows()) == on_a_path
    kinds = set(runs["kind"].to_list())
    assert kinds and kinds <= {"FB", "FIW"}, kinds


def test_overlapped_pairs_are_marked(captured_run: Callable[[str], Recorded]) -> None:
    actions = _actions(captured_run("dualpipev"))

    overlapped = actions.filter(pl.col("overlapped"))

    assert overlapped.height > 0 and overlapped.height % 2 == 0
    assert overlapped["kind"].value_counts().sort("kind")["count"].to_list() == [overlapped.height // 2] * 2


def test_rank_that_cannot_write_reports_it_and_trains_on(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = capture_env(blocker / "traces", "1:3", "run-id")

    done = subprocess.run(
        example_job("1f1b", ranks=2, microbatches=4),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0
    # Ranks share stderr: search the whole text rather than trusting line boundaries.
    reporting = sorted(re.findall(r"tracekit: rank (\d+): cannot write to ", done.stderr))
    assert reporting == ["0", "1"], done.stderr[-3000:]


def test_record_returns_the_command_exit_code(tmp_path: Path) -> None:
    run = record(tmp_path, [sys.executable, "-c", "import sys; sys.exit(3)"])

    manifest = _manifest(tmp_path)
    assert run.exit_code == manifest["exit_code"] == 3
    assert not manifest["complete"] and manifest["world_size"] == 0
    assert "no rank wrote a sidecar" in manifest["problems"][0]


def test_dualpipe_overlap_hook_pairs_are_labelled_without_halves(tmp_path: Path) -> None:
    job = example_job("deepseek-dualpipe", "--overlap-hook", ranks=2, microbatches=4)
    planned = [
        [str(action) for action in flatten([parse_step(text) for text in rank])]
        for rank in deepseek_dualpipe_order(2, 4)
    ]

    run = record(tmp_path, job)

    assert run.exit_code == 0, run.stderr[-3000:]
    actions = _actions(run)
    for (rank, step), rows in actions.group_by("rank", "step", maintain_order=True):
        realized = [
            f"{stage}{kind}{mb}" for stage, kind, mb in rows.select("stage", "kind", "microbatch").iter_rows()
        ]
        assert realized == planned[rank], f"rank {rank}, step {step}"
    # The hook runs both halves in one call: the reader splits each pair span, both halves spanning it.
    halves = actions.filter(pl.col("overlapped"))
    assert halves.height == 2 * 2 * 2
    assert halves.group_by("rank", "start_ns").len()["len"].to_list() == [2] * 4


def test_record_captures_a_torchrun_job(tmp_path: Path) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    job = [*torchrun, *example_job("1f1b", microbatches=4)[1:]]

    run = record(tmp_path, job)

    assert run.exit_code == 0, run.stderr[-3000:]
    manifest = _manifest(tmp_path)
    assert manifest["complete"] and manifest["world_size"] == 2
    for (rank, _step), rows in _actions(run).group_by("rank", "step", maintain_order=True):
        realized = [
            f"{stage}{kind}{mb}" for stage, kind, mb in rows.select("stage", "kind", "microbatch").iter_rows()
        ]
        assert realized == _torch_1f1b_runtime_order(rank, 2, 4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--steps", "1:3", "--", "no-such-command-tracekit"],
            "tracekit: error: cannot run 'no-such-command-tracekit'",
        ),
        (["--steps", "3:1", "--", "true"], "Invalid value for '--steps'"),
    ],
    ids=["missing-command", "empty-window"],
)
def test_record_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    command = [*TRACEKIT, "record", "--out", str(tmp_path)]

    done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 2 and message in done.stderr
