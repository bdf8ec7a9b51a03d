"""Helpers of the collectors' tests: run ``tracekit record`` and the example job in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

RANKS = 4
MICROBATCHES = 8
STEPS = 3
CAPTURED_STEPS = "1:3"
TRACEKIT = (sys.executable, "-c", "from tracekit.cli.main import main; main()")
"""The ``tracekit`` command line, run by this interpreter."""


@dataclass(frozen=True)
class Recorded:
    """One ``tracekit record`` run: where it wrote and what it printed."""

    out_dir: Path
    exit_code: int
    stdout: str
    stderr: str


def record(
    out_dir: Path,
    job: Sequence[str],
    steps: str = CAPTURED_STEPS,
    timeout_s: float = 120,
    pythonpath: Sequence[Path] = (),
) -> Recorded:
    """``tracekit record --out OUT_DIR --steps STEPS --format json -- JOB`` in a subprocess.

    ``pythonpath``: folders put first on the job's PYTHONPATH (e.g. upstream DualPipe).
    """
    command = [
        *TRACEKIT,
        "record",
        "--out",
        str(out_dir),
        "--steps",
        steps,
        "--format",
        "json",
        "--",
        *job,
    ]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    return Recorded(out_dir, done.returncode, done.stdout, done.stderr)


def example_job(
    schedule: str, *extra: str, ranks: int = RANKS, microbatches: int = MICROBATCHES
) -> list[str]:
    """The command line of the example job."""
    return [
        sys.executable,
        "-m",
        "examples.pipeline_job",
        "--schedule",
        schedule,
        "--ranks",
        str(ranks),
        "--microbatches",
        str(microbatches),
        "--steps",
        str(STEPS),
        *extra,
    ]
