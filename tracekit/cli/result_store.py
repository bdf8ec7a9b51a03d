"""A command's printed result kept beside the traces: the same command on the same run prints it again.

A result is stored (``Printed``, as JSON, in ``.tracekit-cache/``) under a key that holds
everything it depends on, so that a stored result is only ever read where recomputing it would
give the same bytes:

- the command, its options as given (the analysis options, flags, the trace path as typed: the
  payload quotes it) and the content of every file an option names (``--kernel-classes``);
- every file beside the traces (trace files, run.json, the collector's sidecars): name, size and
  modification time, as the per-rank caches key a trace;
- tracekit's own source (every module's name, size and modification time) and the polars
  install the figures were computed with;
- every ``TRACEKIT_*`` environment variable.

The key is computed from file metadata alone, without polars or the analysis: a stored report of
eight ranks prints in about the interpreter's start-up. A stored result that cannot be read,
is damaged or is of another format is absent, and the command computes its result again; one that
cannot be written (a full disk, a read-only store) is not kept, silently: storing is never why a
command fails. Formats whose output is files (``--out``) are always computed.

Not for: the per-rank caches the analysis itself keeps (``tracekit.trace.run``, ``tracekit.perrank.cache``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tracekit.present.printed import Printed
from tracekit.trace.cache_dir import CACHE_DIR_NAME, cache_dir_of

STORE_FORMAT = "tracekit-result/1"

KEPT_PER_COMMAND = 8
"""Stored results kept per command and run directory, the most recently written: older option sets
and results of changed traces are removed when a new one is written."""

_PACKAGES = ("tracekit", "collectors")
"""The packages whose source shapes a result."""


def _files_beside(target: Path) -> Iterator[tuple[str, int, int]]:
    """(name, size, mtime ns) of every regular file in the run directory (a file target: its folder)."""
    folder = target if target.is_dir() else target.parent
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name != CACHE_DIR_NAME and entry.is_file():
                info = entry.stat()
                yield entry.name, info.st_size, info.st_mtime_ns


def _source_files() -> Iterator[tuple[str, int, int]]:
    """(path, size, mtime ns) of every module and extension of tracekit and its collectors."""
    root = Path(__file__).resolve().parents[2]
    for package in _PACKAGES:
        for folder, dirs, names in os.walk(root / package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith((".py", ".so", ".pyd")):
                    info = os.stat(os.path.join(folder, name))
                    yield os.path.relpath(os.path.join(folder, name), root), info.st_size, info.st_mtime_ns


def _polars_install() -> tuple[str, int, int]:
    """Where polars is installed and its package file's size and mtime, found without importing it."""
    spec = importlib.util.find_spec("polars")
    origin = "" if spec is None or spec.origin is None else spec.origin
    info = os.stat(origin) if origin else None
    return origin, info.st_size if info else 0, info.st_mtime_ns if info else 0


def _named_file(value: object) -> object:
    """An option's value, with a file it names replaced by the file's content digest."""
    if isinstance(value, Path):
        try:
            return (str(value), hashlib.sha256(value.read_bytes()).hexdigest())
        except OSError:
            return (str(value), None)
    return value


@dataclass(frozen=True)
class ResultStore:
    """Where one command's result on one run is stored, and under which key."""

    folder: Path
    command: str
    key: str

    @classmethod
    def of(cls, command: str, target: Path, options: Mapping[str, object]) -> ResultStore | None:
        """The store of ``command`` with ``options`` on the run at ``target``; None where the run
        cannot be listed (the analysis then says why in its own words)."""
        if not target.exists():
            return None  # a mistyped path: no cache folder appears beside it
        try:
            beside = sorted(_files_beside(target))
            given = sorted((name, repr(_named_file(value))) for name, value in options.items())
            parts = (
                STORE_FORMAT,
                command,
                str(target),
                given,
                beside,
                list(_source_files()),
                _polars_install(),
                sorted((name, value) for name, value in os.environ.items() if name.startswith("TRACEKIT_")),
            )
            key = hashlib.sha256(repr(parts).encode()).hexdigest()[:32]
            return cls(cache_dir_of(target), command, key)
        except OSError:
            return None

    @property
    def path(self) -> Path:
        """The stored result's file."""
        return self.folder / f"{self.command}.result-{self.key}.json"

    def read(self) -> Printed | None:
        """The stored result, or None when absent, unreadable or damaged."""
        try:
            return Printed.from_bytes(self.path.read_bytes())
        except (OSError, ValueError, KeyError, TypeError):
            # orjson.JSONDecodeError is a ValueError
            return None

    def write(self, printed: Printed) -> None:
        """Keep ``printed`` (written whole, then renamed into place), and only the newest
        ``KEPT_PER_COMMAND`` results of this command; nothing when the store cannot be written."""
        partial = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        try:
            partial.write_bytes(printed.to_bytes())
            os.replace(partial, self.path)
            kept = sorted(
                self.folder.glob(f"{self.command}.result-*.json"), key=lambda path: path.stat().st_mtime_ns
            )
            for old in kept[:-KEPT_PER_COMMAND]:
                old.unlink(missing_ok=True)
        except OSError:
            pass  # not kept: the command has printed its result all the same
        finally:  # an error or Ctrl-C before the rename leaves no partial file behind
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
