"""Helpers of the reliability tests: ``tracekit record`` around real jobs, started as a terminal would.

``start`` runs record in a session of its own, like a shell's foreground job, so a test can send
Ctrl-C to that whole group (``os.killpg``) or SIGTERM to record alone, as a user or a scheduler does.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TRACEKIT = (sys.executable, "-c", "from tracekit.cli.main import main; main()")
"""The ``tracekit`` command line, run by this interpreter."""


def example_job(schedule: str, *extra: str, ranks: int = 4, microbatches: int = 4, steps: int = 3) -> list[str]:
    """The example job's command line (real ranks, gloo on CPU, one thread each)."""
    return [
        sys.executable, "-m", "examples.pipeline_job", "--schedule", schedule, "--ranks", str(ranks),
        "--microbatches", str(microbatches), "--steps", str(steps), "--hidden", "128", *extra,
    ]  # fmt: skip


def record_args(out_dir: Path, job: list[str], steps: str = "1:3", grace_s: float = 20) -> list[str]:
    """``tracekit record`` around ``job``, printing JSON."""
    return [
        *TRACEKIT, "record", "--out", str(out_dir), "--steps", steps, "--stop-grace", str(grace_s),
        "--format", "json", "--", *job,
    ]  # fmt: skip


def run(args: list[str], timeout_s: float = 180, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command to its end, capturing its output."""
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)


def start(args: list[str]) -> subprocess.Popen[str]:
    """Start ``args`` in a session of its own (a terminal's foreground job)."""
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def incoming_sidecars(out_dir: Path) -> list[Path]:
    """The sidecars ranks have written so far into record's incoming directory."""
    return sorted(out_dir.glob(".tracekit-incoming-*/rank*.meta.json"))


def wait_for_window(out_dir: Path, ranks: int, timeout_s: float = 120) -> list[int]:
    """Wait until ``ranks`` ranks have opened their capture window; returns their pids."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sidecars = incoming_sidecars(out_dir)
        if len(sidecars) == ranks:
            try:
                return [json.loads(path.read_text())["pid"] for path in sidecars]
            except (OSError, ValueError, KeyError):
                pass  # being replaced right now; read again
        time.sleep(0.1)
    raise AssertionError(f"{ranks} ranks did not open their window within {timeout_s} s")


def alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def manifest(out_dir: Path) -> dict:
    """The run.json in ``out_dir``."""
    return json.loads((out_dir / "run.json").read_text())


def stray_files(out_dir: Path) -> list[str]:
    """Temporary files or scratch directories anywhere under ``out_dir``."""
    return sorted(
        str(path.relative_to(out_dir))
        for path in out_dir.rglob("*")
        if path.name.endswith(".tmp") or path.name.startswith(".tracekit-")
    )


def fill(directory: Path) -> None:
    """Fill the filesystem holding ``directory`` to the last byte."""
    descriptor = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 16, 4096, 1):
            try:
                while os.write(descriptor, b"\0" * size):
                    pass
            except OSError:
                continue
    finally:
        os.close(descriptor)


def digests(root: Path) -> dict[str, str]:
    """Every file under ``root`` (the analysis cache aside) by its SHA-256: to show nothing changed."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".tracekit-cache" not in path.parts
    }
