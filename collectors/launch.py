"""Run an unmodified training command with capture injected, then merge its ranks' files.

``record`` is what ``tracekit record`` calls: it prepends ``collectors/inject`` (a
sitecustomize) to PYTHONPATH, passes a step window, a run id and a capture directory through
TRACEKIT_* variables, runs the command (``python train.py``, ``torchrun ...``: every Python
process it starts inherits the environment) through ``collectors.job`` (own process group,
signals passed on, bounded stop, nothing left running), and writes ``run.json``.

No capture is ever destroyed by a later one. The ranks write into a fresh hidden directory
``DIR/.tracekit-incoming-RUNID``; only once the job has ended and at least one rank has written
its trace there (the new capture really began) is an earlier capture in DIR moved aside, into
``DIR/earlier-YYYYMMDDTHHMMSSZ``, and the new files moved into DIR. A command that cannot start,
or a job that ends before any rank wrote a trace, leaves DIR as it was. Should ``record``
itself be killed (SIGKILL), the new files stay in the hidden directory and DIR is untouched.

If DIR cannot be written, the command still runs, without capture, and the reason is reported.
Not for parsing arguments or printing results (the ``tracekit record`` command does that).
Standard library only: importing this module must not import torch.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from collectors.aside import capture_files, move_aside
from collectors.files import describe_os_error, report, write_json_atomic
from collectors.job import JobOutcome, run_job
from collectors.manifest import INCOMING_PREFIX, MANIFEST_NAME, TRACE_FILE, Manifest
from collectors.merge import build_manifest

INJECT_DIR = Path(__file__).resolve().parent / "inject"
"""Holds the sitecustomize.py that every Python process of the job runs at start-up."""

STOP_GRACE_S = 30.0
"""Seconds the job gets to write its traces after a signal (or after its command exits leaving
processes behind) before they are killed."""

_STRAY = re.compile(r"^\..+\.\d+-[0-9a-f]+\.tmp$|^\.tracekit-(?!incoming-).+")
"""Temporary files and scratch directories a killed rank can leave (collectors.files, capture)."""


NO_TORCH_PREFIX = ".tracekit-no-torch-"
"""Name prefix of the note a job's Python without torch leaves (collectors/inject/sitecustomize.py)."""

NOTHING_CAPTURED_EXIT = 4
"""``tracekit record``'s exit status when the command succeeded but no rank wrote a trace."""


@dataclass(frozen=True)
class RecordOutcome:
    """What ``record`` did."""

    exit_code: int
    """The command's exit status; 128 + N when ``record`` was stopped by signal N."""
    manifest: Manifest | None
    """The merged manifest (None when the job ran without capture)."""
    capture_dir: Path | None = None
    """Where the capture lies: DIR, or the hidden incoming directory when it could not be moved in."""
    earlier_moved_to: Path | None = None
    """Where an earlier capture in DIR was moved, if one was."""

    @property
    def nothing_captured(self) -> bool:
        """True when the command succeeded and a manifest was written, but no rank left a trace."""
        return (
            self.exit_code == 0
            and self.manifest is not None
            and not any(entry.trace for entry in self.manifest.ranks)
        )


def _writable(out_dir: Path) -> str | None:
    """None if ``out_dir`` can be created and written, else why not."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".tracekit-probe-") as probe:
            probe.write(b"\0")  # an empty file needs no block: a full disk accepts it
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as error:
        return describe_os_error(error)
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


def remove_strays(directory: Path) -> list[str]:
    """Delete the temporary files and scratch directories killed writers left; returns their names."""
    removed = []
    for path in directory.iterdir() if directory.is_dir() else []:
        if not _STRAY.match(path.name):
            continue
        try:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        except OSError as error:
            report(f"cannot remove the temporary {path}: {describe_os_error(error)}")
            continue
        removed.append(path.name)
    return removed


def take_no_torch_notes(directory: Path) -> tuple[str, ...]:
    """The interpreters that ran without torch (their notes in ``directory``), the notes removed."""
    pythons = set()
    for path in directory.glob(f"{NO_TORCH_PREFIX}*"):
        try:
            pythons.add(path.read_text(encoding="utf-8", errors="replace").strip())
            path.unlink()
        except OSError as error:
            report(f"cannot read or remove {path}: {describe_os_error(error)}")
    return tuple(sorted(python for python in pythons if python))


def _promote(incoming: Path, out_dir: Path) -> Path | None:
    """Move the new capture from ``incoming`` into ``out_dir``, the earlier one aside; returns where it went."""
    moved_to = move_aside(out_dir)
    for path in sorted(incoming.iterdir()):
        os.replace(path, out_dir / path.name)
    incoming.rmdir()
    return moved_to


def _without_capture(command: Sequence[str], out_dir: Path, why: str, grace_s: float) -> RecordOutcome:
    report(f"cannot write to {out_dir} ({why}); running the command without capture")
    return RecordOutcome(run_job(command, None, grace_s).exit_code, None)


def record(
    command: Sequence[str],
    out_dir: Path,
    steps: str | None,
    grace_s: float = STOP_GRACE_S,
    *,
    extra_env: dict[str, str] | None = None,
    run_id: str | None = None,
) -> RecordOutcome:
    """Run ``command`` capturing steps ``steps`` (``A:B``, ``A:`` or ``all``) into ``out_dir``.

    ``steps`` None captures no window and writes no run.json (``tracekit record --live``, whose
    aggregator asks for captures into directories of their own); ``extra_env`` is added to the
    job's environment. Raises FileNotFoundError / PermissionError if the command cannot be started
    (DIR untouched).
    """
    out_dir = out_dir.resolve()
    problem = _writable(out_dir)
    if problem is not None:
        return _without_capture(command, out_dir, problem, grace_s)
    run_id = run_id or uuid.uuid4().hex
    if steps is None:
        job = run_job(command, {**capture_env(out_dir, None, run_id), **(extra_env or {})}, grace_s)
        return RecordOutcome(job.exit_code, None, out_dir)
    incoming = out_dir / f"{INCOMING_PREFIX}{run_id}"
    try:
        incoming.mkdir()
    except OSError as error:
        return _without_capture(command, out_dir, describe_os_error(error), grace_s)
    try:
        job = run_job(command, {**capture_env(incoming, steps, run_id), **(extra_env or {})}, grace_s)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    without_torch = take_no_torch_notes(incoming)
    strays = remove_strays(incoming)
    manifest = build_manifest(
        incoming,
        run_id=run_id,
        command=command,
        exit_code=job.exit_code,
        interruption=job.interruption,
        left_behind=job.left_behind,
        without_torch=without_torch,
    )
    if strays:
        problem = f"removed {len(strays)} temporary files left by killed writers"
        manifest = dataclasses.replace(manifest, problems=(*manifest.problems, problem))
    # Begun: a rank wrote its trace there. Sidecars alone (ranks that never reached the window, or
    # died in it) are no capture to replace an earlier one with.
    began = any(TRACE_FILE.match(path.name) for path in incoming.iterdir())
    if not began and capture_files(out_dir):
        shutil.rmtree(incoming, ignore_errors=True)
        report(f"no rank wrote a trace; the earlier capture in {out_dir} is left as it was")
        return RecordOutcome(job.exit_code, manifest, None)
    if not any(True for _ in incoming.iterdir()):
        shutil.rmtree(incoming, ignore_errors=True)
        return _finish(job, manifest, out_dir, None)
    try:
        moved_to = _promote(incoming, out_dir)
    except OSError as error:
        report(
            f"cannot move the new capture into {out_dir} ({describe_os_error(error)}); it is in {incoming}"
        )
        return _finish(job, manifest, incoming, None)
    if moved_to is not None:
        manifest = dataclasses.replace(manifest, earlier_capture=moved_to.name)
        report(f"moved the earlier capture in {out_dir} to {moved_to}")
    return _finish(job, manifest, out_dir, moved_to)


def _finish(job: JobOutcome, manifest: Manifest, capture_dir: Path, moved_to: Path | None) -> RecordOutcome:
    try:
        write_json_atomic(capture_dir / MANIFEST_NAME, manifest.to_json())
    except OSError as error:
        report(f"cannot write {capture_dir / MANIFEST_NAME}: {describe_os_error(error)}")
    return RecordOutcome(job.exit_code, manifest, capture_dir, moved_to)
