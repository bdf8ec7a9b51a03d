"""Worker processes start from tracekit alone: a caller's script is never run again in them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "1f1b"

SCRIPT = """\
import tracekit
print("analysed", tracekit.analyse({run!r}).case.measured_ms().size, "steps")
"""
"""What a user writes first: no ``if __name__ == "__main__":`` guard."""


def _uncached(tmp_path: Path) -> Path:
    run = tmp_path / "1f1b"
    shutil.copytree(SAMPLE, run, ignore=shutil.ignore_patterns(".tracekit-cache"))
    return run


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_script_without_a_main_guard_analyses_once_on_worker_processes(tmp_path: Path, how: str) -> None:
    source = SCRIPT.format(run=str(_uncached(tmp_path)))
    script = tmp_path / "analyse_run.py"
    script.write_text(source)

    command = [sys.executable, str(script)] if how == "file" else [sys.executable, "-"]
    done = subprocess.run(
        command, input=None if how == "file" else source, capture_output=True, text=True, timeout=300, check=False
    )

    assert done.returncode == 0, done.stderr[-2000:]
    # Four ranks, not cached: the parse ran on worker processes, and the script's own line came once.
    assert done.stdout.splitlines() == ["analysed 2 steps"]
    assert (tmp_path / "1f1b" / ".tracekit-cache").is_dir()
