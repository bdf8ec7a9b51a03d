"""Run an unmodified training command with capture injected, then merge its ranks' files.

``record`` is what ``tracekit record`` calls: it prepends ``collectors/inject`` (a
sitecustomize) to PYTHONPATH, passes the output directory, step window and a run id through
TRACEKIT_* variables, runs the command (``python train.py``, ``torchrun ...``: every Python
process it starts inherits the environment), waits for it and writes ``run.json``. It returns the
command's exit status unchanged. If the directory cannot be written, the command still runs,
without capture, and the one-line reason is reported.

Not for parsing arguments or printing results (the ``tracekit record`` command does that).
Standard library only: importing this module must not import torch.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from collectors.files import report
from collectors.manifest import CAPTURE_FILES, MANIFEST_NAME, Manifest
from collectors.merge import write_manifest

INJECT_DIR = Path(__file__).resolve().parent / "inject"
"""Holds the sitecustomize.py that every Python process of the job runs at start-up."""


@dataclass(frozen=True)
class RecordOutcome:
    """What ``record`` did: the command's exit status and the merged manifest (None if none was written)."""

    exit_code: int
    manifest: Manifest | None


def _writable(out_dir: Path) -> str | None:
    """None if ``out_dir`` can be created and written, else why not."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".tracekit-probe-"):
            pass
    except OSError as error:
        return str(error)
    return None


def capture_env(
    out_dir: Path, steps: str | None, run_id: str, base: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment that makes every Python process of a job capture into ``out_dir``.

    ``steps`` None: no window (live mode, where the aggregator asks for captures).
    """
    env = dict(os.environ if base is None else base)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(INJECT_DIR) + (os.pathsep + existing if existing else "")
    env["TRACEKIT_OUT"] = str(out_dir)
    env.pop("TRACEKIT_STEPS", None)
    if steps is not None:
        env["TRACEKIT_STEPS"] = steps
    env["TRACEKIT_RUN_ID"] = run_id
    return env


def _clear_earlier_capture(out_dir: Path) -> None:
    stale = [path for path in out_dir.iterdir() if CAPTURE_FILES.match(path.name)]
    for path in stale:
        path.unlink()
    if stale:
        report(f"removed {len(stale)} files of an earlier capture from {out_dir}")


def _run(command: Sequence[str], env: dict[str, str] | None) -> int:
    process = subprocess.Popen(list(command), env=env)
    while True:
        try:
            code = process.wait()
            break
        except KeyboardInterrupt:
            # Ctrl-C reached the job too (same process group); wait for it to wind down, then merge.
            continue
    # A signal death is reported the way shells do (128 + signal number).
    return 128 - code if code < 0 else code


def record(
    command: Sequence[str],
    out_dir: Path,
    steps: str | None,
    *,
    extra_env: dict[str, str] | None = None,
    run_id: str | None = None,
) -> RecordOutcome:
    """Run ``command`` capturing steps ``steps`` (``A:B``, ``A:`` or ``all``) into ``out_dir``.

    ``steps`` None captures no window and writes no run.json (``tracekit record --live``, whose
    aggregator asks for captures); ``extra_env`` is added to the job's environment.
    Raises FileNotFoundError / PermissionError if the command cannot be started.
    """
    out_dir = out_dir.resolve()
    problem = _writable(out_dir)
    if problem is not None:
        report(f"cannot write to {out_dir} ({problem}); running the command without capture")
        return RecordOutcome(_run(command, None), None)
    _clear_earlier_capture(out_dir)
    run_id = run_id or uuid.uuid4().hex
    exit_code = _run(command, {**capture_env(out_dir, steps, run_id), **(extra_env or {})})
    if steps is None:
        return RecordOutcome(exit_code, None)
    try:
        manifest = write_manifest(out_dir, run_id=run_id, command=command, exit_code=exit_code)
    except OSError as error:
        report(f"cannot write {out_dir / MANIFEST_NAME}: {error}")
        return RecordOutcome(exit_code, None)
    return RecordOutcome(exit_code, manifest)
