"""Trace JSON to a raw column table: the compiled event scanner first, then polars' native JSON
reader, then Python objects.

Every reader returns the trace header (the top-level keys tracekit uses) and one row per trace
event with the raw fields ``tracekit.trace.kineto`` needs, in ``RAW_SCHEMA``. The event scanner
(``_eventscan.c``, built at install where a C compiler is present) reads the events array in one
pass, in parts of ``_SCAN_BYTES`` each reduced before the next (a plain file of
``FROM_DISK_BYTES`` or more read from disk a part at a time: ``read_columnar_file``), straight into
Arrow buffers that polars takes over without a copy, about as fast as a typed decode makes Python
objects and with no object per event; it is strict, and anything it does not read exactly as
``read_objects`` would (text in an integer field, a name that is not text, malformed JSON) leaves
the text to the next reader. Given the caller's own reduction of a part (``scan``; kineto's is
``scan_complete``), the scanner keeps only the complete events and flow ends while it reads, so no
column of a dropped event is built. The native reader cuts the ``traceEvents`` array into slices of
whole events and decodes only those fields of each, straight into Arrow columns, on a few threads:
it is several times faster than building Python dicts and its memory is the file plus the narrow
columns, not one Python object per value. Integer fields decode as integers (a slice where one is
text decodes again as text, then is cast); a number with a fraction there, which no exporter
writes, is truncated (``read_objects`` makes it null). It refuses input that does not fit the
declared types, and spans without a cut longer than ``_MAX_SLICE_BYTES``; ``read_objects`` then
parses the same text with orjson (garbage collection paused: millions of new dicts otherwise
trigger it over and over) and gives the same table, or the error that explains what is wrong with
the file.

Not for: interpreting events (``tracekit.trace.kineto``).
"""

from __future__ import annotations

import gc
import io
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, TypeVar

import orjson
import polars as pl

from tracekit.errors import TracekitError

try:
    from tracekit.trace import _eventscan
except ImportError:  # installed without a C compiler: polars' reader does the work
    _eventscan = None

T = TypeVar("T")
Buffer = bytes | bytearray
"""Trace text: a whole file's bytes, or a part read from disk into a reused buffer."""

RAW_SCHEMA: dict[str, pl.DataType] = {
    "ph": pl.String(),
    "cat": pl.String(),
    "name": pl.String(),
    "pid": pl.String(),
    "tid": pl.String(),
    "ts": pl.Float64(),
    "dur": pl.Float64(),
    "id": pl.Int64(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "device": pl.Int64(),
    "stream": pl.Int64(),
}
"""Raw event fields, times in the file's µs. ``pid``/``tid`` stay text (Kineto writes them as numbers
or names; the caller keeps only what reads as an integer); ids and ``args`` integers are integers,
null where the value is not one (text that reads as an integer counts as one)."""

INTEGER_FIELDS = ["id", "correlation", "external_id", "device", "stream"]
"""Raw fields that hold integers."""
_ARGS = {"correlation": "correlation", "External id": "external_id", "device": "device", "stream": "stream"}
_HEADER_SCHEMA: dict[str, pl.DataType] = {
    "distributedInfo": pl.Struct({"rank": pl.Int64(), "world_size": pl.Int64(), "backend": pl.String()}),
    "baseTimeNanoseconds": pl.Int64(),
    "displayTimeUnit": pl.String(),
    "host_name": pl.String(),
}


def _event_schema(integer: pl.DataType) -> dict[str, pl.DataType]:
    """The decoded fields of one event, its integer fields read as ``integer``."""
    return {
        **{key: RAW_SCHEMA[key] for key in ("ph", "cat", "name", "pid", "tid", "ts", "dur")},
        "id": integer,
        "args": pl.Struct({raw: integer for raw in _ARGS}),
    }


_TYPED_SCHEMA = _event_schema(pl.Int64())
"""Integer fields decoded as integers: about a third faster than as text (every exporter writes them
as JSON integers). A slice where one is text does not fit and is decoded by ``_TEXT_SCHEMA``."""
_TEXT_SCHEMA = _event_schema(pl.String())
"""Integer fields decoded as text, then cast: text that reads as an integer counts, other text is null."""


_CHUNK_BYTES = 256 * 1024
"""Events are parsed in slices of about this size: small slices keep the decoder's working set
in cache and bound its memory, and let slices decode on several threads."""
_REDUCE_BYTES = 4 * 1024 * 1024
"""Decoded slices are reduced together once they cover about this much text: a reduce is a query
of about a millisecond whatever its size (as long as decoding a slice), while reducing only at
the end would hold every raw (text) column of the file at once."""
_SCAN_BYTES = 8 * 1024 * 1024
"""The event scanner reads the events in parts of about this size, each reduced before the next is
read: a whole file's raw columns (and the scanner's growing buffers) are never held at once, which
halves a rank's peak memory, while a part is large enough that its reduce query's fixed cost (about a
millisecond) is lost in its scan."""
FROM_DISK_BYTES = 32 * 1024 * 1024
"""A plain JSON file at least this large is scanned part by part straight from disk
(``read_columnar_file``): its text is never held whole, only the part being scanned."""
_EDGE_BYTES = 1024 * 1024
"""How much of such a file's start is read to find its events array, and of its end for the keys
after it."""
_CUT_BYTES = 64 * 1024
"""How far past a part's ``_SCAN_BYTES`` its read reaches for a cut between events (doubled until
one is found, up to ``_MAX_SLICE_BYTES``)."""
_MAX_SLICE_BYTES = 64 * 1024 * 1024
"""A span without a cut longer than this (one huge event, or a run of blank text) is left to
``read_objects``: decoding it here would copy it whole and hold it as one slice."""
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_NOT_BLANK = re.compile(rb"\S")


def _header(text: bytes, body_start: int) -> tuple[dict[str, Any], int] | None:
    """The document without its events, and where the events array ends; None when not found."""
    search_end = len(text)
    for _ in range(16):  # the last ']' closes traceEvents unless a later header value holds one
        end = text.rfind(b"]", body_start, search_end)
        if end < 0:
            return None
        try:
            header = orjson.loads(text[:body_start] + text[end:])
        except orjson.JSONDecodeError:
            search_end = end
            continue
        return (header, end) if isinstance(header, dict) else None
    return None


def _slices(text: bytes, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """[start, end) cut after a '}' that is followed by ',' and '{', about every ``size`` bytes."""
    slices = []
    while end - start > size:
        match = _BETWEEN_EVENTS.search(text, start + size, end)
        if match is None:
            break
        slices.append((start, match.start() + 1))
        start = match.end() - 1
    slices.append((start, end))
    return slices


def _decode(text: bytes, start: int, end: int) -> pl.DataFrame | None:
    """The whole events of ``text[start:end]`` in ``_TYPED_SCHEMA``; None when they do not parse."""
    if end - start > _MAX_SLICE_BYTES:
        return None
    events = b"[" + text[start:end] + b"]"
    try:
        return pl.read_json(io.BytesIO(events), schema=_TYPED_SCHEMA)
    except Exception:  # noqa: BLE001 - an integer field holding text, a cut inside an event, a misfit field
        pass
    try:
        frame = pl.read_json(io.BytesIO(events), schema=_TEXT_SCHEMA)
    except Exception:  # noqa: BLE001 - a cut inside an event, or a field that does not fit: None
        return None
    return frame.with_columns(
        pl.col("id").cast(pl.Int64(), strict=False),
        pl.col("args").struct.with_fields(pl.field(list(_ARGS)).cast(pl.Int64(), strict=False)),
    )


def _raw(frame: pl.DataFrame) -> pl.DataFrame:
    return (
        frame.unnest("args")
        .rename({raw: column for raw, column in _ARGS.items() if raw != column})
        .select(list(RAW_SCHEMA))
    )


def _scanned(text: Buffer, start: int, end: int) -> pl.DataFrame | None:
    """The events of ``text[start:end]`` in ``RAW_SCHEMA`` by the event scanner; None when it is
    not built or does not read them exactly. Its columns come over the Arrow C data interface."""
    if _eventscan is None:
        return None
    try:
        rows, columns = _eventscan.scan(text, start, end)
    except _eventscan.Unsupported:
        return None
    frame = pl.DataFrame([pl.Series(columns[name]) for name in RAW_SCHEMA])
    assert dict(frame.schema) == RAW_SCHEMA and frame.height == rows
    return frame


def scan_complete(
    text: Buffer, start: int, end: int, gpu_categories: tuple[str, ...]
) -> tuple[pl.DataFrame, pl.DataFrame, int] | None:
    """(complete events, ``ac2g`` flow ends, complete events without a numeric ts or dur) of
    ``text[start:end]`` by the event scanner, as ``tracekit.trace.kineto`` keeps them (its slice
    reduction, done while scanning: no column of a dropped event is built); None when it is not
    built or does not read them exactly. ``gpu_categories``: the categories whose events without a
    correlation id keep their raw ``pid``, ``tid`` and ``ts`` (``_pid``, ``_tid``, ``_ts``)."""
    if _eventscan is None:
        return None
    try:
        rows, events, flow_rows, flows, untimed = _eventscan.scan_complete(text, start, end, gpu_categories)
    except _eventscan.Unsupported:
        return None
    events_frame = pl.DataFrame([pl.Series(column) for column in events.values()])
    flows_frame = pl.DataFrame([pl.Series(column) for column in flows.values()])
    assert events_frame.height == rows and flows_frame.height == flow_rows
    return events_frame, flows_frame, untimed


def _scan_part(
    text: Buffer,
    start: int,
    end: int,
    reduce: Callable[[pl.DataFrame], T],
    scan: Callable[[Buffer, int, int], T | None] | None,
) -> T | None:
    """``text[start:end]`` reduced: by ``scan`` (the scanner's own reduction) when given, else the
    scanner's raw events through ``reduce``; None when the scanner cannot read them exactly."""
    if scan is not None:
        return scan(text, start, end)
    scanned = _scanned(text, start, end)
    return None if scanned is None else reduce(scanned)


def _scanned_in_parts(
    text: bytes,
    start: int,
    end: int,
    reduce: Callable[[pl.DataFrame], T],
    scan: Callable[[Buffer, int, int], T | None] | None = None,
) -> list[T] | None:
    """``reduce`` of the scanner's events of each part of ``text[start:end]`` (``_SCAN_BYTES``), in order
    (``scan`` of each part instead, when given: ``_scan_part``); None when the scanner cannot read them
    exactly.

    A cut is only a candidate: a '},{' between two objects nested in one event ends its part inside
    that event, which the scanner refuses (an unterminated object). From the first part it refuses,
    the rest is scanned as one, which gives the whole file's answer: its events, or None.
    """
    reduced: list[T] = []
    for part_start, part_end in _slices(text, start, end, _SCAN_BYTES):
        part = _scan_part(text, part_start, part_end, reduce, scan)
        if part is None:
            rest = _scan_part(text, part_start, end, reduce, scan) if part_end < end else None
            if rest is None:
                return None
            reduced.append(rest)
            return reduced
        reduced.append(part)
        del part
    return reduced


def read_columnar_file(
    handle: BinaryIO,
    size: int,
    reduce: Callable[[pl.DataFrame], T],
    scan: Callable[[Buffer, int, int], T | None] | None = None,
) -> tuple[dict[str, Any], list[T], bytes, bytes] | None:
    """(header, ``reduce`` of each part's raw events, the file's first and last ``_EDGE_BYTES``) of
    the plain JSON trace open in ``handle`` (``size`` bytes), read from disk one part at a time;
    None when the event scanner cannot read it so (then read the text whole: ``read_columnar``).
    ``scan``, when given, reduces each part in place of a raw scan and ``reduce`` (``_scan_part``).

    The same parts, cuts and table as ``read_columnar`` on the whole text, but the text in memory is
    one part (about ``_SCAN_BYTES``) at a time, not the file: a rank's peak memory no longer grows
    with its trace's size.
    """
    if _eventscan is None:
        return None
    fd = handle.fileno()
    head = os.pread(fd, min(size, _EDGE_BYTES), 0)
    opening = _ARRAY_START.search(head)
    if opening is None:
        return None
    body_start = opening.end()
    tail_start = max(body_start, size - _EDGE_BYTES)
    tail = os.pread(fd, size - tail_start, tail_start)
    found = _header(head[:body_start] + tail, body_start)
    if found is None:
        return None
    header, body_end = found
    body_end += tail_start - body_start  # from the joined text's offsets to the file's
    header = {key: header[key] for key in _HEADER_SCHEMA if key in header}
    reduced: list[T] = []
    start = body_start
    buffer = bytearray()
    while start < body_end:
        read = _part_from_disk(fd, start, body_end, buffer)
        if read is None:
            return None
        buffer, length, advance = read
        part = _scan_part(buffer, 0, length, reduce, scan)
        if part is None:  # a cut between nested objects, or what the scanner refuses: the rest at once
            rest = os.pread(fd, body_end - start, start)
            part = _scan_part(rest, 0, len(rest), reduce, scan) if len(rest) == body_end - start else None
            if part is None:
                return None
            reduced.append(part)
            break
        reduced.append(part)
        del part
        start += advance
    return header, reduced or [reduce(pl.DataFrame(schema=RAW_SCHEMA))], head, tail


def _part_from_disk(fd: int, start: int, end: int, buffer: bytearray) -> tuple[bytearray, int, int] | None:
    """(the text read from ``start`` into ``buffer``, or into a larger one when it is too small; the
    part's length in it; where the next part starts, relative): the text up to the first cut past
    ``_SCAN_BYTES``, or up to ``end``; None when the file is shorter than it was or no cut lies
    within ``_MAX_SLICE_BYTES``. One buffer serves every part of a file (the scanner copies what it
    keeps): a new one for each part would have the kernel map and zero thousands of pages again."""
    reach = _SCAN_BYTES + _CUT_BYTES
    while True:
        wanted = min(reach, end - start)
        if len(buffer) < wanted:
            buffer = bytearray(wanted)
        with memoryview(buffer) as whole, whole[:wanted] as view:
            if os.preadv(fd, [view], start) != wanted:
                return None
        if start + wanted >= end:
            return buffer, wanted, wanted
        match = _BETWEEN_EVENTS.search(buffer, _SCAN_BYTES, wanted)
        if match is not None:
            return buffer, match.start() + 1, match.end() - 1
        if reach >= _MAX_SLICE_BYTES:
            return None
        reach *= 2


def _decoded(text: bytes, slices: list[tuple[int, int]]) -> Iterator[tuple[pl.DataFrame | None, int]]:
    """(decoded events, text bytes they span) of whole-event spans, in order; a None frame ends it.

    Slices decode on a few threads, a bounded window ahead of the consumer, so decoded slices do
    not pile up while the consumer reduces them. A slice that does not parse (a false cut, or a
    field that does not fit) is joined to the next and parsed again here; None when none is left.
    """
    workers = max(1, min(4, pl.thread_pool_size()))
    window = _REDUCE_BYTES // _CHUNK_BYTES + 2 * workers
    futures: dict[int, Future[pl.DataFrame | None]] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            submitted = index = 0
            while index < len(slices):
                submitted = max(submitted, index)
                while submitted < min(index + window, len(slices)):
                    futures[submitted] = pool.submit(_decode, text, *slices[submitted])
                    submitted += 1
                start, end = slices[index]
                frame = futures.pop(index).result()
                while frame is None and index + 1 < len(slices):  # a false cut: widen to the next one
                    index += 1
                    end = slices[index][1]
                    unneeded = futures.pop(index, None)  # None when the widening ran past the window
                    if unneeded is not None:
                        unneeded.cancel()
                    frame = _decode(text, start, end)
                yield frame, end - start
                if frame is None:
                    return
                index += 1
        finally:  # the consumer stopped (a None frame, an error): decode nothing more
            for future in futures.values():
                future.cancel()


def read_columnar(
    text: bytes,
    reduce: Callable[[pl.DataFrame], T],
    scan: Callable[[Buffer, int, int], T | None] | None = None,
) -> tuple[dict[str, Any], list[T]] | None:
    """(header, ``reduce`` of consecutive slices' raw events) by the event scanner (its parts reduced
    by ``scan`` when given), else polars' JSON reader; None when the text does not fit either.

    ``reduce`` runs on each run of decoded slices covering about ``_REDUCE_BYTES`` of text, as soon
    as they are decoded, so only reduced events are kept. A cut is only a candidate (``},{`` may
    also occur inside an event): every accepted slice holds whole events (``_decoded``).
    """
    opening = _ARRAY_START.search(text)
    if opening is None:
        return None
    found = _header(text, opening.end())
    if found is None:
        return None
    header, body_end = found
    body_start = opening.end()
    header = {key: header[key] for key in _HEADER_SCHEMA if key in header}
    if _NOT_BLANK.search(text, body_start, body_end) is None:  # no copy of the body to strip it
        return header, [reduce(pl.DataFrame(schema=RAW_SCHEMA))]
    scanned = _scanned_in_parts(text, body_start, body_end, reduce, scan)
    if scanned is not None:
        return header, scanned

    reduced: list[T] = []
    pending: list[pl.DataFrame] = []
    pending_bytes = 0
    for frame, size in _decoded(text, _slices(text, body_start, body_end, _CHUNK_BYTES)):
        if frame is None:
            return None
        pending.append(frame)
        pending_bytes += size
        if pending_bytes >= _REDUCE_BYTES:
            reduced.append(reduce(_raw(pl.concat(pending))))
            pending, pending_bytes = [], 0
    if pending:
        reduced.append(reduce(_raw(pl.concat(pending))))
    return header, reduced


def _text_or_none(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _number_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def load_document(text: bytes, path: Any) -> dict[str, Any]:
    """The trace document by orjson, its ``traceEvents`` a list; TracekitError naming ``path`` if not."""
    collecting = gc.isenabled()
    gc.disable()  # millions of new dicts would trigger the collector over and over
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise TracekitError(f"not valid JSON, truncated or corrupt ({error})", path) from None
    finally:
        if collecting:
            gc.enable()
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise TracekitError("no traceEvents list: not a Kineto/chrome trace", path)
    return document


def read_objects(text: bytes, path: Any) -> tuple[dict[str, Any], pl.DataFrame]:
    """(header, raw events) by orjson; TracekitError naming ``path`` when the text is not a trace."""
    document = load_document(text, path)
    columns: dict[str, list[Any]] = {name: [] for name in RAW_SCHEMA}
    for event in document["traceEvents"]:
        if not isinstance(event, dict):
            continue
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        for key in ("ph", "cat", "name"):
            value = event.get(key)
            columns[key].append(None if value is None else str(value))
        columns["pid"].append(_text_or_none(event.get("pid")))
        columns["tid"].append(_text_or_none(event.get("tid")))
        columns["ts"].append(_number_or_none(event.get("ts")))
        columns["dur"].append(_number_or_none(event.get("dur")))
        columns["id"].append(_text_or_none(event.get("id")))
        for raw, column in _ARGS.items():
            columns[column].append(_text_or_none(args.get(raw)))
    header = {key: document[key] for key in _HEADER_SCHEMA if key in document}
    text_schema = {**RAW_SCHEMA, **{name: pl.String() for name in INTEGER_FIELDS}}
    frame = pl.DataFrame(columns, schema=text_schema)
    return header, frame.with_columns(pl.col(INTEGER_FIELDS).cast(pl.Int64(), strict=False))
