"""Atomic file writes and the one-line problem reports of the collectors.

Every file a capture leaves is written to a temporary name in its final directory and renamed into
place (``os.replace``), so a crash or a full disk never leaves a file that looks complete. Problems
are reported as one line on stderr prefixed ``tracekit:``: the collector runs inside someone's
training job and must never raise into it. Standard library only.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

FAULTS: dict[int, str] = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "a parent of it is not a directory",
    errno.EISDIR: "it is a directory",
    errno.EEXIST: "it exists and is not a directory",
    errno.ENOENT: "no such file or directory",
}
"""errno -> how a one-line report names the fault (tracekit's command line uses the same words)."""


def describe_errno(number: int | None, fallback: str) -> str:
    """The few lowercase words naming OS error ``number`` (``no space left on device``)."""
    if number in FAULTS:
        return FAULTS[number]
    return os.strerror(number).lower() if number is not None else fallback


def describe_os_error(error: OSError) -> str:
    """What went wrong, without the temporary file names an OSError's text carries."""
    return describe_errno(error.errno, str(error))


_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F) if code != 0x09}
"""Control characters -> a visible ``\\xNN``: a problem's text (an error's repr, a path) never
steers the terminal."""


def report(message: str) -> None:
    """Print one ``tracekit:`` line on stderr; never raises (stderr itself may be gone)."""
    try:
        # One write per line: ranks share stderr, and print() writes the newline apart.
        sys.stderr.write(f"tracekit: {message.translate(_CONTROL)}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001, S110 - a closed stderr must not break the job either
        pass


def _temporary_beside(path: Path) -> Path:
    """A new empty file next to ``path`` with the usual permissions (mkstemp's are owner-only)."""
    while True:
        temporary = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
        try:
            os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temporary
        except FileExistsError:
            continue


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename; raises OSError on failure."""
    temporary = _temporary_beside(path)
    try:
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON to ``path`` atomically; raises OSError on failure."""
    write_bytes_atomic(path, (json.dumps(payload, indent=2, sort_keys=False) + "\n").encode())


def overwrite_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path``, in place if no new file fits (a full disk); raises OSError.

    For the last word of a failing rank: its sidecar already holds blocks that the new text reuses.
    """
    data = (json.dumps(payload, indent=2, sort_keys=False) + "\n").encode()
    try:
        write_bytes_atomic(path, data)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT) or not path.is_file():
            raise
        with open(path, "r+b") as file:
            file.write(data)
            file.truncate()


def gzip_file_atomic(source: Path, path: Path) -> None:
    """Gzip ``source`` into ``path`` atomically; raises OSError on failure."""
    if not source.is_file():
        raise OSError(errno.ENOENT, "the profiler wrote no trace", str(source))
    temporary = _temporary_beside(path)
    try:
        # Level 6: within a few percent of level 9 on JSON traces, at a fraction of its time.
        with open(source, "rb") as raw, gzip.open(temporary, "wb", compresslevel=6) as packed:
            shutil.copyfileobj(raw, packed, length=1 << 20)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


_MIN_FREE_BYTES = 1 << 16
"""Below this much free space, a trace the profiler failed to write is put down to a full disk."""


def check_written(raw: Path, out_dir: Path) -> None:
    """OSError when a writer that reports no errors (torch.profiler's exporter) left no ``raw``."""
    if raw.is_file() and raw.stat().st_size:
        return
    try:
        disk = os.statvfs(out_dir)
        full = disk.f_bavail * disk.f_frsize < _MIN_FREE_BYTES
    except OSError:
        full = False
    if full:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(raw))
    raise OSError(errno.EIO, "the profiler wrote no trace file", str(raw))


def read_json(path: Path) -> dict[str, Any]:
    """Parse a JSON object from ``path``; raises OSError or ValueError."""
    payload = json.loads(path.read_text())
    if not isinstance(payload, dict):
        raise ValueError("not a JSON object")
    return payload
