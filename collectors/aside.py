"""Moving an earlier capture aside, so that no capture is ever destroyed by a later one.

A capture directory holds one run's files (``collectors.manifest.CAPTURE_FILES``). When a new run
writes its first trace into a directory that holds another run's files, those files move into
``DIR/earlier-YYYYMMDDTHHMMSSZ/`` (named after the newest of them); nothing is ever deleted.
``tracekit record`` does this once, after the job (``collectors.launch``); the ranks of a job
captured with ``collectors.Capture`` each do it as their own trace is written, under a lock on the
directory, so the first rank moves the earlier capture and the others find it gone.

A file belongs to the run its sidecar names: a sidecar by its ``run_id``, a trace by its rank's
sidecar beside it (none: another run's), ``run.json`` by its ``run_id``. Not for writing the files
(``collectors.files``). Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import os
import re
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from collectors.files import read_json
from collectors.manifest import (
    CAPTURE_FILES,
    INCOMING_PREFIX,
    MANIFEST_NAME,
    RUN_ID_METADATA,
    SIDECAR,
    TRACE_FILE,
    sidecar_name,
)

_PROBES_FILE = re.compile(r"^rank(\d+)\.probes\.jsonl\.gz$")
"""A rank's per-action probes (``collectors.probes``): of the run its sidecar names, as its trace is."""

EARLIER_PREFIX = "earlier-"
"""Name prefix of the directory an earlier capture is moved into."""


def capture_files(directory: Path) -> list[Path]:
    """The capture files (traces, sidecars, run.json) directly in ``directory``."""
    if not directory.is_dir():
        return []
    return sorted(path for path in directory.iterdir() if CAPTURE_FILES.match(path.name))


def _run_id_in(path: Path) -> str | None:
    try:
        run_id = read_json(path).get("run_id")
    except (OSError, ValueError):
        return None
    return run_id if isinstance(run_id, str) else None


def run_of(path: Path) -> str | None:
    """The run id of capture file ``path`` (see the module docstring); None when unknown."""
    trace = TRACE_FILE.match(path.name) or _PROBES_FILE.match(path.name)
    if trace is not None:
        sidecar = path.with_name(sidecar_name(int(trace[1])))
        return _run_id_in(sidecar) if sidecar.is_file() else None
    if SIDECAR.match(path.name) or path.name == MANIFEST_NAME:
        return _run_id_in(path)
    return None


def move_aside(out_dir: Path, keep_run_id: str | None = None) -> Path | None:
    """Move the capture files in ``out_dir`` not of run ``keep_run_id`` into ``out_dir/earlier-STAMP``.

    Returns that directory, or None when there was nothing to move. Raises OSError.
    """
    earlier = [
        path
        for path in capture_files(out_dir)
        if keep_run_id is None or run_of(path) != keep_run_id
    ]
    if not earlier:
        return None
    newest = max(path.stat().st_mtime for path in earlier)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(newest))
    target = out_dir / f"{EARLIER_PREFIX}{stamp}"
    suffix = 1
    while target.exists():
        suffix += 1
        target = out_dir / f"{EARLIER_PREFIX}{stamp}-{suffix}"
    target.mkdir()
    for path in earlier:
        os.replace(path, target / path.name)
    return target


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` itself (no lock file is left behind); raises OSError."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


_HEADER_BYTES = 1 << 16
"""How much of a trace's text is read for its run id: the profiler writes metadata before its events."""
_RUN_ID_IN_HEADER = re.compile(rb'"' + RUN_ID_METADATA.encode() + rb'"\s*:\s*"([^"]*)"')
_RUN_ID_IN_NAME = re.compile(rb'"traceName"\s*:\s*"[^"]*' + INCOMING_PREFIX.encode() + rb'([0-9a-f]+)/')
"""Traces written before the run id was in their metadata: the incoming directory in ``traceName``."""


def trace_run_id(path: Path, *, read_to_end: bool = True) -> str | None:
    """The run id a trace file carries (its metadata, else its ``traceName``); None when it has none.

    ``read_to_end`` False reads the header only (an older trace's ``traceName`` is at its end).
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as file:
            head = file.read(_HEADER_BYTES)
            if _RUN_ID_IN_HEADER.search(head) is not None:
                return run_id_in(head, b"")
            tail = head
            while read_to_end and (chunk := file.read(1 << 20)):
                tail = tail[-4096:] + chunk
    except (OSError, EOFError, zlib.error):
        return None
    return run_id_in(b"", tail)


def run_id_in(head: bytes | bytearray | memoryview, tail: bytes | bytearray | memoryview) -> str | None:
    """The run id in a trace's text: its metadata in ``head`` (the first ``_HEADER_BYTES``), else
    the ``traceName`` in ``tail`` (its last 8 KiB, where an older trace has it); None when neither has it.

    The reader, which holds the whole text, passes both slices and needs no second read.
    """
    found = _RUN_ID_IN_HEADER.search(head[:_HEADER_BYTES])
    if found is not None:
        return found[1].decode(errors="replace") or None
    found = _RUN_ID_IN_NAME.search(tail[-8192:])
    return None if found is None else found[1].decode()


def runs_in(directory: Path) -> dict[str | None, list[str]]:
    """Run id -> the trace and sidecar files of ``directory`` that belong to it (None: no id)."""
    runs: dict[str | None, list[str]] = {}
    for path in capture_files(directory):
        if path.name == MANIFEST_NAME:
            continue
        run_id = trace_run_id(path) if TRACE_FILE.match(path.name) else None
        runs.setdefault(run_id or run_of(path), []).append(path.name)
    return runs


def describe_runs(runs: dict[str | None, list[str]]) -> str:
    """``run 51c25138: rank0.json.gz, rank0.meta.json; run b5c24278: ...`` for a one-line message."""
    return "; ".join(
        f"run {run_id[:8] if run_id else '(no id)'}: {', '.join(names)}" for run_id, names in runs.items()
    )
