"""The files commands write (``--out`` directories, ``--png``/``--svg`` charts, HTML pages).

One place turns a failure to read or write a file into the one-line message of a TracekitError
naming the file and the fault (``no space left on device``, ``permission denied``, ...): the CLI's
command group calls ``os_error_message`` for any OSError a command lets through, and the output
layer writes through ``write_atomic``, so a full disk never leaves a half-written result behind.

Not for the trace cache (``tracekit.trace.run``) nor for the collectors' files
(``collectors.files``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from collectors.files import describe_errno
from tracekit.errors import TracekitError

_POLARS_OS_ERROR = re.compile(r"\(os error (?P<errno>\d+)\)(?::\s*(?P<path>\S.*))?$")
"""polars reports I/O failures as OSError("Not a directory (os error 20): PATH"), without errno."""




def _errno_of(error: OSError) -> int | None:
    if error.errno is not None:
        return error.errno
    match = _POLARS_OS_ERROR.search(str(error))
    return int(match["errno"]) if match else None


def fault(error: OSError) -> str:
    """What went wrong, in a few lowercase words (``no space left on device``)."""
    return describe_errno(_errno_of(error), str(error))


def os_error_message(error: OSError) -> str:
    """``PATH: fault`` for an OSError that reached the command line."""
    path = error.filename
    if path is None:
        match = _POLARS_OS_ERROR.search(str(error))
        path = match["path"] if match and match["path"] else None
    return f"{path}: {fault(error)}" if path is not None else fault(error)


def output_dir(path: Path) -> Path:
    """Create directory ``path`` (and its parents) for output; TracekitError naming it on failure."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TracekitError(f"cannot create this output directory: {fault(error)}", path) from None
    return path


def write_atomic(path: Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` by ``write(temporary)`` and a rename; TracekitError naming ``path`` on failure.

    A failed write leaves neither a partial ``path`` nor the temporary file.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    except OSError as error:
        _remove(temporary)
        raise TracekitError(f"cannot write: {fault(error)}", path) from None
    except BaseException:
        _remove(temporary)
        raise
    return path


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # the directory itself is gone or unreadable: nothing of ours is left in it
