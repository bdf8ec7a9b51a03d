"""When a job succeeds but nothing was captured, ``tracekit record`` says exactly why and exits 4."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from collector_runs import Recorded, example_job, record

from collectors.launch import NOTHING_CAPTURED_EXIT

pytestmark = pytest.mark.slow

DDP_JOB = [sys.executable, str(Path(__file__).with_name("ddp_job.py"))]
PLAIN_LOOP = [
    sys.executable,
    "-c",
    "import torch\nw = torch.randn(8, 8, requires_grad=True)\nfor _ in range(3):\n    (w @ w).sum().backward()\n",
]


TORCH_TEARDOWN_ABORT = "terminate called without an active exception"
"""What torch 2.13 prints when it aborts a gloo rank while the interpreter tears it down (a worker
thread left joinable): the job's own failure, after its last step, with or without tracekit
(``ddp_job.py`` makes it rare, not impossible)."""


def _record_finished(tmp_path: Path, job: list[str]) -> Recorded:
    """``record`` of ``job``, run once more when torch aborted it at exit: such a run is not the
    finished job the test is about, and says nothing of tracekit."""
    run = record(tmp_path / "run", job, timeout_s=300)
    if run.exit_code != NOTHING_CAPTURED_EXIT and TORCH_TEARDOWN_ABORT in run.stderr:
        run = record(tmp_path / "again", job, timeout_s=300)
    return run


@pytest.mark.parametrize("job", [DDP_JOB, PLAIN_LOOP], ids=["ddp", "plain-loop"])
def test_a_job_without_a_known_schedule_gets_the_true_message(tmp_path: Path, job: list[str]) -> None:
    run = _record_finished(tmp_path, job)

    assert run.exit_code == NOTHING_CAPTURED_EXIT == 4, run.stderr[-3000:]
    manifest = json.loads((run.out_dir / "run.json").read_text())
    assert manifest["exit_code"] == 0 and manifest["ranks"] == [] and not manifest["complete"]
    message = manifest["problems"][0]
    assert message.startswith("the job finished but no pipeline schedule tracekit recognizes ran")
    for named in ("torch.distributed.pipelining", "DualPipeV", "Megatron-core", "collectors.Capture"):
        assert named in message
    assert "the job failed" not in run.stderr and message in run.stderr.replace("\n", " ")
    assert list(run.out_dir.glob("rank*")) == []


def test_a_job_that_ends_before_the_window_says_how_far_it_got(tmp_path: Path) -> None:
    job = example_job("1f1b", ranks=2, microbatches=4)
    job[job.index("--steps") + 1] = "1"

    run = record(tmp_path, job, steps="2:4", timeout_s=300)

    assert run.exit_code == NOTHING_CAPTURED_EXIT, run.stderr[-3000:]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert [entry["status"] for entry in manifest["ranks"]] == ["not-reached", "not-reached"]
    for entry in manifest["ranks"]:
        assert entry["problems"][0] == (
            "the job ran 1 training steps, but the capture window starts at step 2: no step was captured"
        )
