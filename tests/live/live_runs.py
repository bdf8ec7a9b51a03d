"""Helpers of the live tests: run ``tracekit record --live`` on the example job, read live.jsonl."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACEKIT = (sys.executable, "-c", "from tracekit.cli.main import main; main()")


@dataclass(frozen=True)
class LiveRun:
    """One ``tracekit record --live`` run."""

    out_dir: Path
    exit_code: int
    stdout: str
    stderr: str

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        """live.jsonl's records, of type ``kind`` when given."""
        return [r for r in read_log(self.out_dir) if kind is None or r["type"] == kind]


def read_log(out_dir: Path) -> list[dict[str, Any]]:
    path = out_dir / "live.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def job(
    *extra: str, steps: int, schedule: str = "1f1b", ranks: int = 4, microbatches: int = 4, hidden: int = 64
) -> list[str]:
    """The example job's command line with small actions (a step takes milliseconds)."""
    return [
        sys.executable, "-m", "examples.pipeline_job", "--schedule", schedule, "--ranks", str(ranks),
        "--microbatches", str(microbatches), "--steps", str(steps), "--hidden", str(hidden), *extra,
    ]  # fmt: skip


def record_live(
    out_dir: Path,
    command: Sequence[str],
    *live_args: str,
    during: Callable[[Path], None] | None = None,
    timeout_s: float = 300,
) -> LiveRun:
    """``tracekit record --live --format json`` in a subprocess; ``during(out_dir)`` runs while it does."""
    process = subprocess.Popen(
        [
            *TRACEKIT,
            "record",
            "--out",
            str(out_dir),
            "--live",
            *live_args,
            "--format",
            "json",
            "--",
            *command,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if during is not None:
            during(out_dir)
        stdout, stderr = process.communicate(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return LiveRun(out_dir, process.returncode, stdout, stderr)


def wait_for(out_dir: Path, kind: str, timeout_s: float = 240) -> dict[str, Any]:
    """The first live.jsonl record of type ``kind``, waiting for it to be written."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [r for r in read_log(out_dir) if r["type"] == kind]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no {kind!r} record in {out_dir / 'live.jsonl'} within {timeout_s} s")
