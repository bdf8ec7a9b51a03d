"""Read one Kineto chrome-trace file (what torch.profiler exports, plain or gzipped) into the event table.

Only complete ("X") events become rows; metadata, flow and instant events are dropped here, since
the correlation ids carried in ``args`` already link CPU launches to GPU work. A GPU event without
``args.correlation`` takes the id of the ``ac2g`` flow arrow ending on it. Timestamps must be µs
(as the format specifies, whatever ``displayTimeUnit`` says): nanosecond values, or a
``baseTimeNanoseconds`` added to times that are already absolute, are errors, not silent shifts.
The trace-level facts (rank, world size, clock base) come back beside the table as a ``TraceInfo``.
Decoding the JSON is ``tracekit.trace.columnar``'s job.

Not for: deciding which files form a run (``tracekit.trace.run``) or what the events mean
(``tracekit.trace.labels`` and ``tracekit.analysis``).
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from collectors.aside import run_id_in
from tracekit.errors import TracekitError
from tracekit.trace.columnar import (
    FROM_DISK_BYTES,
    Buffer,
    read_columnar,
    read_columnar_file,
    read_objects,
    scan_complete,
)
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
    run_id: str | None
    """The run id the trace's own text carries (``collectors.aside.run_id_in``); None: none."""
    warnings: tuple[str, ...]


MAX_TRACE_MB_DEFAULT = 512
"""The most JSON text tracekit reads from one trace file, MiB: a plain file's size, or what a gzip
decompresses to. torch.profiler's traces of a few steps are tens to a few hundred MB; past this a
file is refused in one line (docs/report.md, "Errors") before it is decoded, and a gzip is
decompressed only up to it, so a gzip bomb (a small file that inflates to gigabytes) costs at most
this much memory and about a second per 100 MiB."""
MAX_TRACE_MB_VARIABLE = "TRACEKIT_MAX_TRACE_MB"
"""The environment variable that sets another limit, in MiB."""
_INFLATE_CHUNK = 64 << 20
"""Most text one decompress call produces, so the limit is checked between steps of this size."""
_FEED_BYTES = 1 << 20
"""Most compressed input given to one decompress call."""
_MAX_MEMBERS = 10_000
"""Most gzip members in one file (profilers write one; ``cat a.gz b.gz`` a few)."""


def max_trace_bytes() -> int:
    """The limit on one trace file's JSON text, bytes (``TRACEKIT_MAX_TRACE_MB`` or the default)."""
    setting = os.environ.get(MAX_TRACE_MB_VARIABLE, "").strip()
    if not setting:
        return MAX_TRACE_MB_DEFAULT << 20
    try:
        megabytes = float(setting)
    except ValueError:
        megabytes = -1.0
    if not megabytes > 0:
        raise TracekitError(f"{MAX_TRACE_MB_VARIABLE}={setting!r}: expected a positive number of MiB")
    return int(megabytes * (1 << 20))


def _too_large(limit: int, what: str) -> str:
    return (
        f"{what} more than {limit / (1 << 20):g} MiB of JSON, the most read from one trace file "
        f"(set {MAX_TRACE_MB_VARIABLE} to read larger traces)"
    )


def _inflate(raw: bytes, limit: int, path: Path) -> bytearray:
    """Every gzip member of ``raw`` decompressed; TracekitError as soon as the text passes ``limit``.

    Input goes in by views of at most ``_FEED_BYTES`` at an offset, so neither a long member nor
    many short ones make the input be copied more than about once.
    """
    text = bytearray()
    view = memoryview(raw)
    offset, members = 0, 0
    while offset < len(raw):
        if raw[offset] == 0:  # the padding some writers put after the last member
            rest = bytes(view[offset:]).lstrip(b"\0")
            if not rest:
                break
            offset = len(raw) - len(rest)
        members += 1
        if members > _MAX_MEMBERS:
            raise TracekitError(f"more than {_MAX_MEMBERS} gzip members: not a trace a profiler wrote", path)
        inflater = zlib.decompressobj(wbits=31)
        while not inflater.eof:
            if offset >= len(raw):
                raise TracekitError("truncated or corrupt gzip (it ends inside a compressed member)", path)
            fed = view[offset : offset + _FEED_BYTES]
            text += inflater.decompress(fed, _INFLATE_CHUNK)
            if len(text) > limit:
                raise TracekitError(_too_large(limit, "decompresses to"), path)
            offset += len(fed) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
    return text


def read_bytes(path: Path) -> bytes | bytearray:
    """The file's JSON text, gunzipped when it is gzip; TracekitError on empty, unreadable, corrupt or
    oversized files (``max_trace_bytes``)."""
    limit = max_trace_bytes()
    try:
        with path.open("rb") as handle:
            if os.fstat(handle.fileno()).st_size > limit and handle.read(2) != _GZIP_MAGIC:
                raise TracekitError(_too_large(limit, "holds"), path)
            handle.seek(0)
            raw = handle.read()
    except OSError as error:
        raise TracekitError(f"cannot read: {error.strerror}", path) from None
    if not raw:
        raise TracekitError("empty file", path)
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return _inflate(raw, limit, path)
    except zlib.error as error:
        raise TracekitError(f"truncated or corrupt gzip ({error})", path) from None


def _rank_of(header: dict[str, Any], path: Path) -> tuple[int, int | None, str]:
    info = header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        world = info.get("world_size")
        return info["rank"], world if isinstance(world, int) else None, "distributedInfo"
    match = _RANK_IN_NAME.search(path.name)
    if match is None:
        raise TracekitError("no distributedInfo and no rank in the file name (rank<N> or worker<N>)", path)
    return int(match[1]), None, "file name"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
"""Categories of work that runs on a GPU: an event of one without a correlation id is tied to its
launch by its ``ac2g`` flow arrow."""
_ABSOLUTE_US = 10**15
"""A ``ts`` above this (µs, late 2001 as an epoch time) is already absolute, not relative to a base."""
_LATEST_NS = 4_102_444_800 * 10**9
"""2100-01-01 in epoch ns: later times mean ns were read as µs or the base was added twice."""


def _check_clock(
    path: Path, document: dict[str, Any], base_ns: int, ts_min: float, ts_max: float
) -> list[str]:
    """TracekitError when timestamps cannot be µs on the stated base; warnings for odd but usable headers."""
    unit = document.get("displayTimeUnit")
    warnings = []
    if ts_max * 1000 + base_ns > _LATEST_NS:
        raise TracekitError(
            f"timestamps reach {ts_max:.0f}: past 2100 when read as µs"
            + (f" on baseTimeNanoseconds {base_ns}" if base_ns else "")
            + f"; they look like nanoseconds (displayTimeUnit {unit!r}), but the trace format requires µs",
            path,
        )
    if base_ns and ts_min > _ABSOLUTE_US:
        raise TracekitError(
            f"ts values are already absolute epoch µs (from {ts_min:.0f}) yet baseTimeNanoseconds is "
            f"{base_ns}: adding both would shift every time; fix the exporter",
            path,
        )
    if unit not in (None, "ms", "ns"):
        raise TracekitError(f"unknown displayTimeUnit {unit!r} (the format allows ms or ns)", path)
    if unit == "ns":
        warnings.append(
            f"{path}: displayTimeUnit 'ns' only changes how viewers show times; ts and dur are read as µs, "
            "as the trace format specifies, and their magnitudes agree"
        )
    return warnings


def _ns(column: str) -> pl.Expr:
    """Integer ns from float µs: whole µs first, then the fraction, so epoch times stay exact."""
    whole = pl.col(column).floor()
    return whole.cast(pl.Int64()) * 1000 + ((pl.col(column) - whole) * 1000).round().cast(pl.Int64())


@dataclass(frozen=True)
class _Slice:
    """A slice of a trace's events, reduced to what the event table keeps."""

    events: pl.DataFrame
    """Complete events: the event schema's columns without ``rank``, ``start_ns`` and ``dur_ns``,
    with the raw µs ``ts`` and ``dur`` instead, plus the raw ``pid``/``tid``/``ts`` of GPU events
    without a correlation id (null elsewhere) to find their flow arrow by."""
    flows: pl.DataFrame
    """``ac2g`` flow ends: raw ``pid``, ``tid``, ``ts`` and the flow ``id``."""
    untimed: int
    """Complete events whose ``ts`` or ``dur`` is missing or not a number (text, say): left out."""


_SLICE_EVENTS_SCHEMA: dict[str, pl.DataType] = {
    "cat": pl.String(),
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "ts": pl.Float64(),
    "dur": pl.Float64(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "device": pl.Int32(),
    "stream": pl.Int64(),
    "_pid": pl.String(),
    "_tid": pl.String(),
    "_ts": pl.Float64(),
}
"""``_Slice.events``' columns, in order (``_reduce``'s and the scanner's ``scan_complete``'s)."""
_FLOWS_SCHEMA: dict[str, pl.DataType] = {
    "_pid": pl.String(),
    "_tid": pl.String(),
    "_ts": pl.Float64(),
    "_flow": pl.Int64(),
}
"""``_Slice.flows``' columns."""


def _scan_slice(text: Buffer, start: int, end: int) -> _Slice | None:
    """``_reduce`` of the events of ``text[start:end]``, done by the event scanner while it reads them
    (``scan_complete``: the same table, no raw column of a dropped event built); None when the scanner
    is not built or does not read them exactly."""
    scanned = scan_complete(text, start, end, _GPU_CATEGORIES)
    if scanned is None:
        return None
    events, flows, untimed = scanned
    assert list(events.schema.items()) == list(_SLICE_EVENTS_SCHEMA.items())
    assert list(flows.schema.items()) == list(_FLOWS_SCHEMA.items())
    return _Slice(events, flows, untimed)


def _reduce(raw: pl.DataFrame) -> _Slice:
    """One slice of raw events (``RAW_SCHEMA``) reduced to complete events and flow ends, in one query."""
    typed = raw.lazy()  # integer fields arrive typed (``RAW_SCHEMA``)
    unlinked = pl.col("cat").is_in(_GPU_CATEGORIES) & pl.col("correlation").is_null()
    events = typed.filter(
        (pl.col("ph") == "X") & pl.col("ts").is_not_null() & pl.col("dur").is_not_null()
    ).select(
        pl.col("cat").fill_null(""),
        pl.col("name").fill_null(""),
        pl.col("pid").cast(pl.Int64(), strict=False),
        pl.col("tid").cast(pl.Int64(), strict=False),
        "ts",
        "dur",
        "correlation",
        "external_id",
        pl.col("device").cast(pl.Int32(), strict=False),  # a device index beyond Int32 is no device
        "stream",
        *(pl.when(unlinked).then(pl.col(key)).alias(f"_{key}") for key in ("pid", "tid", "ts")),
    )
    flows = typed.filter(
        (pl.col("ph") == "f") & (pl.col("cat") == "ac2g") & pl.col("id").is_not_null()
    ).select(
        pl.col("pid").alias("_pid"),
        pl.col("tid").alias("_tid"),
        pl.col("ts").alias("_ts"),
        pl.col("id").alias("_flow"),
    )
    untimed = typed.filter((pl.col("ph") == "X") & (pl.col("ts").is_null() | pl.col("dur").is_null())).select(
        pl.len()
    )
    events_frame, flows_frame, untimed_frame = pl.collect_all([events, flows, untimed])
    return _Slice(events_frame, flows_frame, int(untimed_frame.item()))


def _linked_by_flow(events: pl.DataFrame, flows: pl.DataFrame) -> pl.DataFrame:
    """GPU events without ``args.correlation`` take the id of the ``ac2g`` flow arrow ending on them."""
    keys = ["_pid", "_tid", "_ts"]
    if events["_ts"].null_count() == events.height:
        return events.drop(keys)
    flows = flows.unique(keys, keep="last")
    return (
        events.join(flows, on=keys, how="left", nulls_equal=False)
        .with_columns(pl.coalesce("correlation", "_flow").alias("correlation"))
        .drop(*keys, "_flow")
    )


def _read_from_disk(path: Path) -> tuple[dict[str, Any], list[_Slice], bytes, bytes] | None:
    """A large plain JSON trace read part by part (``read_columnar_file``); None for any other file,
    or one the scanner does not read so, which ``read_bytes`` then reads whole (and faults name)."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < FROM_DISK_BYTES or size > max_trace_bytes() or handle.read(2) == _GZIP_MAGIC:
                return None
            return read_columnar_file(handle, size, _reduce, _scan_slice)
    except OSError:
        return None


def read_trace(path: Path) -> tuple[pl.DataFrame, TraceInfo]:
    """Parse one trace file into (event table, trace facts); TracekitError names the file and the fault."""
    from_disk = _read_from_disk(path)
    if from_disk is not None:
        header, slices, head, tail = from_disk
        run_id = run_id_in(head, tail)
    else:
        text = read_bytes(path)
        run_id = run_id_in(memoryview(text), memoryview(text))
        parsed = read_columnar(text, _reduce, _scan_slice)
        if parsed is None:
            header, raw = read_objects(text, path)
            parsed = header, [_reduce(raw)]
        del text
        header, slices = parsed
    rank, world_size, rank_source = _rank_of(header, path)
    base_ns = _int_or_none(header.get("baseTimeNanoseconds")) or 0
    warnings: list[str] = []

    events = pl.concat([part.events for part in slices])
    kept = pl.col("dur") >= 0
    negative, first_ts, last_ts = events.select(
        (~kept).sum().alias("negative"),
        pl.col("ts").filter(kept).min().alias("first"),
        (pl.col("ts") + pl.col("dur")).filter(kept).max().alias("last"),
    ).row(0)
    if negative:
        events = events.filter(kept)
    if events.is_empty():
        raise TracekitError("no complete (ph 'X') events: nothing was recorded", path)
    warnings.extend(_check_clock(path, header, base_ns, first_ts, last_ts))  # before any µs -> ns product
    if negative:
        warnings.append(f"{path}: {negative} events with a negative duration were skipped")
    untimed = sum(part.untimed for part in slices)
    if untimed:
        warnings.append(f"{path}: {untimed} complete events whose ts or dur is not a number were skipped")
    events = _linked_by_flow(events, pl.concat([part.flows for part in slices]))
    del slices
    unlinked = events.select(
        (pl.col("cat").is_in(_GPU_CATEGORIES) & pl.col("correlation").is_null()).sum()
    ).item()
    if unlinked:
        warnings.append(
            f"{path}: {unlinked} GPU events have no correlation id and no ac2g flow: they cannot be tied "
            "to the CPU call that launched them, so no label is projected onto them"
        )
    frame = events.with_columns(
        pl.lit(rank, pl.Int32()).alias("rank"),
        (_ns("ts") + base_ns).alias("start_ns"),
        _ns("dur").alias("dur_ns"),
    ).select(list(EVENT_SCHEMA))
    assert dict(frame.schema) == EVENT_SCHEMA
    count = frame.height
    distributed = header.get("distributedInfo")
    info = TraceInfo(
        path=path,
        rank=rank,
        world_size=world_size,
        rank_source=rank_source,
        backend=distributed.get("backend") if isinstance(distributed, dict) else None,
        host_name=header.get("host_name") if isinstance(header.get("host_name"), str) else None,
        base_ns=base_ns,
        event_count=count,
        run_id=run_id,
        warnings=tuple(warnings),
    )
    return frame, info
