"""The derived cache: per-rank reductions kept beside the rank's parsed events, never trusted blindly.

An entry is one rank's result of one reduction: a few Parquet tables and a JSON record naming them
with the SHA-256 of each file. Its key (``derived_key``) joins the rank's parse-cache key (trace
name, size, mtime, event-schema version: the entry dies with the trace) to a digest of everything
else that shapes the result: the inputs given (stage, cut, kernel-class patterns, the rank's p2p
waits), the schemas the tables are written in, and the source of the modules that compute them
(a changed formula never reads an old figure). The record is written last, so an interrupted
write leaves no entry; on reading, a missing file, a digest that does not match, a table that does
not parse or is not in its schema makes the entry absent, and the caller computes it again.

Not for: the parsed events themselves (``tracekit.trace.run``) or what is computed
(``tracekit.perrank.tasks``).
"""

from __future__ import annotations

import hashlib
import io
import os
from functools import cache
from pathlib import Path

import orjson
import polars as pl

DERIVED_FORMAT = "tracekit-derived/1"

_CODE = (
    "analysis/realized.py",
    "analysis/intervals.py",
    "trace/labels.py",
    "trace/schema.py",
    "gpu/analysis.py",
    "gpu/breakdown.py",
    "gpu/kernel_classes.py",
    "gpu/overlap.py",
    "gpu/schedule.py",
    "gpu/timeline.py",
    "perrank/tasks.py",
    "perrank/cache.py",
)
"""The modules whose source shapes a derived entry (relative to the ``tracekit`` package)."""

Frames = dict[str, pl.DataFrame]


@cache
def code_digest() -> str:
    """SHA-256 of the source of the modules that compute derived entries."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for name in _CODE:
        digest.update(name.encode())
        digest.update((package / name).read_bytes())
    return digest.hexdigest()


def derived_key(table: Path, kind: str, inputs: object) -> str:
    """The entry name of reduction ``kind`` of the rank whose parse cache is ``table``, for ``inputs``.

    ``inputs`` is anything with a faithful, deterministic ``repr`` (tuples of ints, strings, frozen
    dataclasses, schema dicts).
    """
    digest = hashlib.sha256(f"{DERIVED_FORMAT}\n{code_digest()}\n{inputs!r}".encode()).hexdigest()[:24]
    return f"{table.stem}.{kind}-{digest}"


def frame_digest(frame: pl.DataFrame) -> str:
    """A digest of a frame's schema and rows, for keys that depend on a computed table."""
    payload = orjson.dumps([[f"{name}: {dtype}" for name, dtype in frame.schema.items()], frame.rows()])
    return hashlib.sha256(payload).hexdigest()


def _record_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"{key}.derived.json"


def _write_atomic(path: Path, data: bytes) -> None:
    partial = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, path)


def write_entry(cache_dir: Path, key: str, frames: Frames, facts: dict[str, object]) -> None:
    """Store ``frames`` and JSON-able ``facts`` as entry ``key``; the record goes last, naming each file's digest."""
    files: dict[str, dict[str, str]] = {}
    for name, frame in frames.items():
        buffer = io.BytesIO()
        frame.write_parquet(buffer, compression="lz4", statistics=False)
        data = buffer.getvalue()
        path = cache_dir / f"{key}.{name}.parquet"
        _write_atomic(path, data)
        files[name] = {"file": path.name, "sha256": hashlib.sha256(data).hexdigest()}
    record = {"format": DERIVED_FORMAT, "key": key, "facts": facts, "frames": files}
    _write_atomic(_record_path(cache_dir, key), orjson.dumps(record))


def read_entry(
    cache_dir: Path, key: str, schemas: dict[str, dict[str, pl.DataType]]
) -> tuple[Frames, dict[str, object]] | None:
    """Entry ``key``'s frames named in ``schemas`` (each checked against its schema) and facts; None when absent or damaged."""
    try:
        record = orjson.loads(_record_path(cache_dir, key).read_bytes())
        if record.get("format") != DERIVED_FORMAT or record.get("key") != key:
            return None
        frames: Frames = {}
        for name, schema in schemas.items():
            listed = record["frames"][name]
            data = (cache_dir / listed["file"]).read_bytes()
            if hashlib.sha256(data).hexdigest() != listed["sha256"]:
                return None
            frame = pl.read_parquet(io.BytesIO(data))
            if dict(frame.schema) != schema:
                return None
            frames[name] = frame
        return frames, record["facts"]
    except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError):
        # orjson.JSONDecodeError is a ValueError; a damaged Parquet file raises a polars error.
        return None
