"""A forward-only call (an evaluation) inside the capture window adds no step and no action.

torch's ``schedule.eval()`` and DualPipe under ``torch.no_grad()`` (its ``forward_only``) run right
after training step 1, inside the window 1:3; Megatron's ``forward_only=True`` and DualPipeV are
covered with their own runs (test_megatron.py, test_dualpipev.py).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest
from collector_runs import example_job, record

from tracekit.run_analysis import realized_actions
from tracekit.trace.run import load_run

pytestmark = pytest.mark.slow

RANKS = 2
MICROBATCHES = 4
_ACTION = re.compile(r"^tracekit:\d+[FBIW]\d+$")


@pytest.mark.parametrize(
    ("schedule", "stages"), [("1f1b", RANKS), ("gpipe", RANKS), ("deepseek-dualpipe", 2 * RANKS)]
)
def test_eval_inside_the_window_is_left_out_with_a_note(tmp_path: Path, schedule: str, stages: int) -> None:
    job = example_job(schedule, "--eval-step", "1", ranks=RANKS, microbatches=MICROBATCHES)

    run = record(tmp_path, job, timeout_s=300)

    assert run.exit_code == 0, run.stderr[-3000:]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["complete"] and manifest["steps"]["captured"] == [1, 3]
    assert manifest["eval_steps"]["left_out"] == 1
    assert "forward-only (evaluation)" in manifest["notes"][0] and manifest["problems"] == []
    actions = realized_actions(load_run(tmp_path, workers=1))
    assert sorted(actions["step"].unique().to_list()) == [0, 1]
    per_step = actions.group_by("step", "stage", "microbatch").agg(pl.col("kind").sort().str.join(""))
    assert per_step.height == 2 * stages * MICROBATCHES // (2 if schedule == "deepseek-dualpipe" else 1)
    assert set(per_step["kind"].to_list()) <= {"BF", "FIW"}
    # No label at all comes from the evaluation: every action label belongs to a training step.
    labels = []
    for rank in range(RANKS):
        trace = json.loads(gzip.decompress((tmp_path / f"rank{rank}.json.gz").read_bytes()))
        labels += [event["name"] for event in trace["traceEvents"] if _ACTION.match(event.get("name", ""))]
    assert len(labels) == actions.height
