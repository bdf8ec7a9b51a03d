"""Worker processes start from tracekit alone (a caller's script never runs again in them) and fail in one line."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.errors import TracekitError
from tracekit.perrank.engine import LocalEngine, run_tasks

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


def test_a_worker_that_dies_is_one_error_not_a_broken_pool() -> None:
    with LocalEngine(workers=2).executor(2) as pool, pytest.raises(TracekitError, match="a worker process died"):
        run_tasks(pool, os._exit, [3, 3])  # each worker exits at once, as the out-of-memory killer would


def test_a_worker_without_tracekit_is_told_to_install_it() -> None:
    with LocalEngine(workers=2).executor(2) as pool, pytest.raises(TracekitError, match="install tracekit where"):
        run_tasks(pool, importlib.import_module, ["tracekit.not_on_this_worker", "json"])
