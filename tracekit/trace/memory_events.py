"""Read the profiler's memory events (``[memory]`` instants) of one rank's trace into a typed table.

torch.profiler with ``profile_memory=True`` writes one instant event (``ph`` ``i``, name
``[memory]``) per allocation and per free the allocator made while the profiler ran, with ``args``
``Bytes`` (positive: allocated, negative: freed), ``Total Allocated``, ``Total Reserved``,
``Device Type`` (0 CPU, 1 CUDA), ``Device Id`` (-1 on CPU) and ``Addr``. What those totals mean
differs by device (docs/memory.md): on CUDA they are the caching allocator's, so they count every
byte allocated before the window too; torch 2.13's CPU build counts from the profiler's start (a
free of a block allocated before it is not reported at all) and writes ``Total Reserved`` 0. The
trace header says whether memory was recorded at all (``profile_memory``: 1): a trace without it
holds no memory events, and ``MemoryTrace.recorded`` is False (never a table of zeros).

The event table (``tracekit.trace.kineto``) keeps complete events only, so this module reads the
trace's JSON itself (orjson, one pass, garbage collection paused) and keeps the memory instants;
it is called once per rank by ``tracekit.analysis.memory`` through ``RunAnalysis.memory``, only
when a memory figure is asked for. Times use the event table's clock: integer ns, the trace's
``baseTimeNanoseconds`` added. Not for: what the bytes are (``tracekit.analysis.memory``).

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank of the trace | never null |
| ts_ns | Int64 | when the allocation or free happened, ns, the event table's clock | never null |
| bytes | Int64 | bytes allocated (> 0) or freed (< 0) | never null |
| allocated_bytes | Int64 | ``Total Allocated`` after it, on its device | never null |
| reserved_bytes | Int64 | ``Total Reserved`` after it (0 on CPU) | never null |
| device_type | Int32 | 0 CPU, 1 CUDA (c10's DeviceType) | never null |
| device | Int32 | ``Device Id``, -1 on CPU | never null |
| addr | Int64 | ``Addr``: the block's address, pairing a free with its allocation | never null |
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import TracekitError
from tracekit.trace.columnar import load_document
from tracekit.trace.kineto import read_bytes

MEMORY_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "ts_ns": pl.Int64(),
    "bytes": pl.Int64(),
    "allocated_bytes": pl.Int64(),
    "reserved_bytes": pl.Int64(),
    "device_type": pl.Int32(),
    "device": pl.Int32(),
    "addr": pl.Int64(),
}
"""One row per memory event; see the module docstring."""

MEMORY_EVENT_NAME = "[memory]"
"""The name torch.profiler gives its memory instants."""
CPU, CUDA = 0, 1
"""``device_type`` values (c10::DeviceType)."""

_ARGS = (
    ("Bytes", "bytes"),
    ("Total Allocated", "allocated_bytes"),
    ("Total Reserved", "reserved_bytes"),
    ("Addr", "addr"),
)


@dataclass(frozen=True)
class MemoryTrace:
    """One rank's memory events and whether the trace recorded memory at all."""

    rank: int
    recorded: bool
    """True when the trace header says ``profile_memory``: its events (possibly none) are all there were."""
    events: pl.DataFrame
    """MEMORY_EVENT_SCHEMA, ordered by time; empty when not recorded."""


def _ns(ts_us: float) -> int:
    """Integer ns from float µs, whole µs first as the event table does, so the clocks agree."""
    whole = int(ts_us // 1)
    return whole * 1000 + round((ts_us - whole) * 1000)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_HEADER_BYTES = 1 << 16
"""How much of a trace's decompressed start ``_says_unrecorded`` reads: Kineto writes its header
keys (``profile_memory`` among them) before ``traceEvents``."""


def _says_unrecorded(path: Path) -> bool:
    """True when the trace's header, read alone, ends at ``traceEvents`` without ``profile_memory``."""
    try:
        with path.open("rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            stream = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
            head = stream.read(_HEADER_BYTES)
    except (OSError, EOFError, zlib.error):
        return False  # the full read reports the fault
    events_at = head.find(b'"traceEvents"')
    return events_at >= 0 and b'"profile_memory"' not in head[:events_at]


def read_memory_events(path: Path, rank: int, cut_ns: int | None = None) -> MemoryTrace:
    """The memory events of rank ``rank``'s trace at ``path``, before ``cut_ns`` when given.

    TracekitError naming the file for an unreadable trace or a memory event without its byte counts.
    A trace whose header has no ``profile_memory`` is not parsed further: it recorded no memory.
    """
    if _says_unrecorded(path):
        return MemoryTrace(rank, False, pl.DataFrame(schema=MEMORY_EVENT_SCHEMA))
    document = load_document(read_bytes(path), path)
    base_ns = _int(document.get("baseTimeNanoseconds")) or 0
    recorded = bool(document.get("profile_memory"))
    rows: dict[str, list[int]] = {name: [] for name in MEMORY_EVENT_SCHEMA}
    for index, event in enumerate(document["traceEvents"]):
        if not isinstance(event, dict) or event.get("name") != MEMORY_EVENT_NAME:
            continue
        args, ts = event.get("args"), event.get("ts")
        values = [_int(args.get(key)) for key, _ in _ARGS] if isinstance(args, dict) else [None]
        if not isinstance(ts, (int, float)) or None in values:
            raise TracekitError(
                f"traceEvents[{index}]: a [memory] event without ts, Bytes, Addr or totals", path
            )
        ts_ns = _ns(float(ts)) + base_ns
        if cut_ns is not None and ts_ns >= cut_ns:
            continue
        recorded = True
        rows["rank"].append(rank)
        rows["ts_ns"].append(ts_ns)
        for (_, column), value in zip(_ARGS, values):
            rows[column].append(value)  # type: ignore[arg-type]
        rows["device_type"].append(_int(args.get("Device Type")) or 0)
        device = _int(args.get("Device Id"))
        rows["device"].append(-1 if device is None else device)
    events = pl.DataFrame(rows, schema=MEMORY_EVENT_SCHEMA).sort("ts_ns", maintain_order=True)
    return MemoryTrace(rank, recorded, events)
