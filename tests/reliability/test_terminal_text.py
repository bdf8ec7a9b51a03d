"""Text read from trace files and sidecars reaches the terminal with its control characters shown,
never obeyed: an escape sequence in a rank's problems cannot clear the screen or recolour it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from record_runs import TRACEKIT, run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
ESCAPE = "\x1b[2J\x1b[31mowned\x07"


def test_escape_sequences_in_a_sidecars_problems_are_shown_not_obeyed(tmp_path: Path) -> None:
    root = tmp_path / "run"
    shutil.copytree(SAMPLES / "1f1b", root, ignore=shutil.ignore_patterns(".tracekit-cache"))
    manifest = json.loads((root / "run.json").read_text())
    manifest["ranks"][1]["complete"] = manifest["complete"] = False
    manifest["ranks"][1]["status"] = "partial"
    manifest["ranks"][1]["problems"] = [f"bad {ESCAPE} text"]
    (root / "run.json").write_text(json.dumps(manifest))

    done = run([*TRACEKIT, "report", str(root)])

    assert done.returncode == 0, done.stderr[-2000:]
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert "\\x1b[2J\\x1b[31mowned\\x07" in done.stderr
