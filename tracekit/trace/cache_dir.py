"""Where tracekit keeps what it derives from a run: ``.tracekit-cache/`` beside the traces.

The parsed event tables (``tracekit.trace.run``), the per-rank reductions (``tracekit.perrank.cache``)
and the commands' stored results (``tracekit.cli.result_store``) all live there; a read-only trace
directory gets a directory of its own under the temp dir instead. This module imports nothing but
the standard library, so a command can find its stored result before it loads the analysis.

Not for: what is kept there (each kind's module says how its entries are named and checked).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

CACHE_DIR_NAME = ".tracekit-cache"


def cache_dir_of(root: Path) -> Path:
    """The cache beside the traces, or a per-directory one under the temp dir when that is read-only.

    A directory without write permission bits counts as read-only even for root, who could write
    there anyway: a shared trace store marked read-only is never written to.
    """
    folder = root if root.is_dir() else root.parent
    beside = folder / CACHE_DIR_NAME
    try:
        if not folder.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise PermissionError(f"{folder} is marked read-only")
        beside.mkdir(exist_ok=True)
        probe = beside / f".probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
        return beside
    except OSError:
        digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]
        fallback = Path(tempfile.gettempdir()) / "tracekit-cache" / digest
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback
