"""Read one Kineto chrome-trace file (what torch.profiler exports, plain or gzipped) into the event table.

Only complete ("X") events become rows; metadata, flow and instant events are dropped here, since
the correlation ids carried in ``args`` already link CPU launches to GPU work. The trace-level
facts (rank, world size, clock base) come back beside the table as a ``TraceInfo``.

Not for: deciding which files form a run (``tracekit.trace.run``) or what the events mean
(``tracekit.trace.labels`` and ``tracekit.analysis``).
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from tracekit.errors import TracekitError
from tracekit.trace.schema import EVENT_SCHEMA

_GZIP_MAGIC = b"\x1f\x8b"
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[_-]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class TraceInfo:
    """Facts about one trace file, from its header."""

    path: Path
    rank: int
    world_size: int | None
    """``distributedInfo.world_size``; None when the trace has no distributedInfo."""
    rank_source: str
    """Where the rank came from: ``distributedInfo`` or ``file name``."""
    backend: str | None
    host_name: str | None
    base_ns: int
    """``baseTimeNanoseconds`` added to every timestamp (0 when absent)."""
    event_count: int
    warnings: tuple[str, ...]


def read_bytes(path: Path) -> bytes:
    """The file's JSON text, gunzipped when it is gzip; TracekitError on empty, unreadable or corrupt files."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise TracekitError(f"cannot read: {error.strerror}", path) from None
    if not raw:
        raise TracekitError("empty file", path)
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as error:
        raise TracekitError(f"truncated or corrupt gzip ({error})", path) from None


def _load_document(path: Path) -> dict[str, Any]:
    text = read_bytes(path)
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise TracekitError(f"not valid JSON, truncated or corrupt ({error})", path) from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise TracekitError("no traceEvents list: not a Kineto/chrome trace", path)
    return document


def _rank_of(document: dict[str, Any], path: Path) -> tuple[int, int | None, str]:
    info = document.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        world = info.get("world_size")
        return info["rank"], world if isinstance(world, int) else None, "distributedInfo"
    match = _RANK_IN_NAME.search(path.name)
    if match is None:
        raise TracekitError("no distributedInfo and no rank in the file name (rank<N> or worker<N>)", path)
    return int(match[1]), None, "file name"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_trace(path: Path) -> tuple[pl.DataFrame, TraceInfo]:
    """Parse one trace file into (event table, trace facts); TracekitError names the file and the fault."""
    document = _load_document(path)
    rank, world_size, rank_source = _rank_of(document, path)
    base_ns = _int_or_none(document.get("baseTimeNanoseconds")) or 0
    warnings: list[str] = []

    columns: dict[str, list[Any]] = {name: [] for name in EVENT_SCHEMA}
    negative = 0
    for event in document["traceEvents"]:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        ts, dur = event.get("ts"), event.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
            continue
        if dur < 0:
            negative += 1
            continue
        args = event.get("args")
        if not isinstance(args, dict):
            args = {}
        columns["cat"].append(str(event.get("cat", "")))
        columns["name"].append(str(event.get("name", "")))
        columns["pid"].append(_int_or_none(event.get("pid")))
        columns["tid"].append(_int_or_none(event.get("tid")))
        # Kineto writes microseconds with up to three decimals: round to integer nanoseconds.
        columns["start_ns"].append(round(ts * 1000) + base_ns)
        columns["dur_ns"].append(round(dur * 1000))
        columns["correlation"].append(_int_or_none(args.get("correlation")))
        columns["external_id"].append(_int_or_none(args.get("External id")))
        columns["device"].append(_int_or_none(args.get("device")))
        columns["stream"].append(_int_or_none(args.get("stream")))
    count = len(columns["name"])
    columns["rank"] = [rank] * count
    if negative:
        warnings.append(f"{path}: {negative} events with a negative duration were skipped")
    if count == 0:
        raise TracekitError("no complete (ph 'X') events: nothing was recorded", path)

    frame = pl.DataFrame(columns, schema=EVENT_SCHEMA)
    info = TraceInfo(
        path=path,
        rank=rank,
        world_size=world_size,
        rank_source=rank_source,
        backend=(document.get("distributedInfo") or {}).get("backend"),
        host_name=document.get("host_name") if isinstance(document.get("host_name"), str) else None,
        base_ns=base_ns,
        event_count=count,
        warnings=tuple(warnings),
    )
    return frame, info
