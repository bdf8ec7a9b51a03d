"""The event scanner reads exactly what the object reader reads, or leaves the text to it.

Properties over generated events: any JSON value in any field, escapes, non-ASCII text, compact
and indented writers; the scanner's table equals ``read_objects``' whenever it gives one, gives one
whenever every field has the type an exporter writes, and never gives one for text that is not JSON.
Its own reduction (``scan_complete``, what ``tracekit.trace.kineto`` keeps of the events) equals
kineto's ``_reduce`` of its raw table, on events that exercise every value that reduction tests.
"""

from __future__ import annotations

import json

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tracekit.errors import TracekitError
from tracekit.trace import columnar, kineto
from tracekit.trace.columnar import read_objects

pytestmark = pytest.mark.skipif(columnar._eventscan is None, reason="the event scanner is not built")

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    _TEXT,
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
_ANY = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_NUMBER = st.one_of(st.integers(0, 2**62), st.floats(0, 1e17, allow_nan=False))


def _event(
    value: st.SearchStrategy, text: st.SearchStrategy, number: st.SearchStrategy, integer
) -> st.SearchStrategy:
    args = st.fixed_dictionaries(
        {},
        optional={
            "correlation": integer,
            "External id": integer,
            "device": integer,
            "stream": integer,
            "Input Dims": _ANY,
            "name": _ANY,
        },
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "ph": text,
            "cat": text,
            "name": text,
            "pid": st.one_of(_INT64, _TEXT) if value is None else value,
            "tid": st.one_of(_INT64, _TEXT) if value is None else value,
            "ts": number,
            "dur": number,
            "id": integer,
            "args": args if value is None else st.one_of(args, value),
            "s": _ANY,
        },
    )


_EXPORTED = _event(
    None, st.one_of(st.none(), _TEXT), st.one_of(st.none(), _NUMBER), st.one_of(st.none(), _INT64)
)
"""Events with the field types exporters write (nulls included): the scanner reads every one."""
_ODD = _event(_ANY, _ANY, _ANY, _ANY)
"""Any JSON value in any field."""


def _text(events: list, indent: bool) -> tuple[bytes, int, int]:
    body = json.dumps(
        events, indent=2 if indent else None, separators=None if indent else (",", ":")
    ).encode()
    text = b'{"schemaVersion": 1, "traceEvents": ' + body + b"}"
    start = len(b'{"schemaVersion": 1, "traceEvents": [')
    return text, start, len(text) - 2


_CASES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_CASES
@given(events=st.lists(_EXPORTED, max_size=20), indent=st.booleans())
def test_exported_fields_are_read_as_the_object_reader_reads_them(events: list, indent: bool) -> None:
    text, start, end = _text(events, indent)

    scanned = columnar._scanned(text, start, end)

    assert scanned is not None
    assert scanned.equals(read_objects(text, "trace")[1])


@_CASES
@given(
    events=st.lists(st.one_of(_EXPORTED, _ANY), max_size=16), indent=st.booleans(), part=st.integers(1, 400)
)
def test_a_scan_in_parts_reads_what_one_scan_reads(events: list, indent: bool, part: int) -> None:
    # Nested objects side by side in one event ('},{' inside it) are cuts a part may end at.
    text, start, end = _text(events, indent)
    whole = columnar._scanned(text, start, end)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(columnar, "_SCAN_BYTES", part)
        parts = columnar._scanned_in_parts(text, start, end, lambda frame: frame)

    if whole is None:
        assert parts is None
    else:
        assert parts is not None and pl.concat(parts).equals(whole)


def test_a_part_that_ends_between_nested_objects_is_read_again_with_the_rest(monkeypatch) -> None:
    events = [
        {"ph": "X", "name": f"op{i}", "ts": i, "dur": 1, "args": {"shapes": [{"a": i}, {"b": i}]}}
        for i in range(6)
    ]
    text, start, end = _text(events, False)
    monkeypatch.setattr(columnar, "_SCAN_BYTES", 10)
    cuts = columnar._slices(text, start, end, columnar._SCAN_BYTES)
    assert any(not text[a:b].endswith(b"}}") for a, b in cuts)  # a cut between two objects inside an event

    parts = columnar._scanned_in_parts(text, start, end, lambda frame: frame)

    assert parts is not None and pl.concat(parts).equals(read_objects(text, "trace")[1])


def _objects(text: bytes) -> pl.DataFrame | None:
    """The object reader's raw events; None where it refuses the text (orjson reads no integer past 64 bits)."""
    try:
        return read_objects(text, "trace")[1]
    except TracekitError:
        return None


@_CASES
@given(events=st.lists(st.one_of(_ODD, _ANY), max_size=12), indent=st.booleans())
def test_any_value_is_read_as_the_object_reader_reads_it_or_left_to_it(events: list, indent: bool) -> None:
    text, start, end = _text(events, indent)

    scanned = columnar._scanned(text, start, end)

    if scanned is not None:
        objects = _objects(text)
        assert objects is not None and scanned.equals(objects)


@_CASES
@given(
    events=st.lists(_EXPORTED, min_size=1, max_size=8),
    position=st.floats(0, 1),
    damage=st.sampled_from([b"", b"{", b"}", b'"', b",", b"\\", b"\x00", b"\xff", b"-", b"1e", b"tru"]),
)
def test_text_that_is_not_json_is_never_read(events: list, position: float, damage: bytes) -> None:
    text, start, end = _text(events, False)
    cut = start + min(int(position * (end - start)), end - start - 1)  # inside the events
    broken = text[:cut] + damage + text[cut + 1 :]
    try:
        orjson.loads(broken)
    except orjson.JSONDecodeError:
        valid = False
    else:
        valid = True

    scanned = columnar._scanned(broken, start, len(broken) - 2)

    if not valid:
        assert scanned is None
    elif scanned is not None:
        assert scanned.equals(_objects(broken))


@pytest.mark.parametrize("bad", [b"\x01", b"\x1f", b"\xff", b"\xc3", b'"', b"\\x"])
def test_a_bad_byte_anywhere_in_a_long_string_is_seen(bad: bytes) -> None:
    # Long text is checked eight bytes at a time: a bad byte must stop it wherever it sits.
    for position in range(40):
        name = b"n" * position + bad + b"n" * (39 - position)
        text = b'{"traceEvents": [{"ph": "X", "name": "' + name + b'", "ts": 1, "dur": 2}]}'
        start = text.index(b"[") + 1

        scanned = columnar._scanned(text, start, len(text) - 2)

        assert scanned is None, (bad, position)


_INTEGER_TEXT = st.from_regex(r"\A[+-]?0{0,3}[0-9]{1,5}\Z", fullmatch=True) | st.sampled_from(
    ["", "+", "-", " 5", "5 ", "0x10", "1e3", "5.0"]
    + ["9223372036854775807", "-9223372036854775808", "9223372036854775808"]
)
"""Text a pid or tid may hold: what polars' non-strict cast reads as an integer, and what it does not."""


def _mostly(usual: st.SearchStrategy, *odd: st.SearchStrategy) -> st.SearchStrategy:
    """``usual`` four times in five, else one of ``odd``."""
    return st.integers(0, 4).flatmap(lambda draw: usual if draw else st.one_of(*odd))


_KINETO_EVENT = st.fixed_dictionaries(
    {
        "ph": _mostly(
            st.sampled_from(["X", "f"]), st.sampled_from(["s", "i", "M", "x", "XX"]), st.none(), _TEXT
        ),
        "cat": _mostly(
            st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g", "cpu_op"]),
            st.sampled_from(["Kernel", "ac2g ", ""]),
            st.none(),
            _TEXT,
        ),
        "name": _mostly(_TEXT, st.none()),
        "pid": _mostly(_INT64 | _INTEGER_TEXT, _TEXT, st.none()),
        "tid": _mostly(_INT64 | _INTEGER_TEXT, _TEXT, st.none()),
        "ts": _mostly(_NUMBER, st.none(), _TEXT),
        "dur": _mostly(_NUMBER, st.none(), _TEXT),
        "id": _mostly(_INT64, st.none()),
        "args": st.fixed_dictionaries(
            {
                "correlation": st.none() | _INT64,
                "device": _mostly(st.integers(-(2**33), 2**33), st.none()),
            },
            optional={"External id": _INT64 | st.none(), "stream": _INT64 | st.none()},
        ),
    },
)
"""Events as Kineto writes them, with the values that decide what is kept: every phase and category
the reduction tests, pids and tids as numbers or text (signs, leading zeros, past int64), devices
past int32, missing or textual times, ids and correlation ids or none."""


_EDGES = [
    {"ph": "X", "cat": "kernel", "name": "k", "pid": "-9223372036854775808", "tid": "+05", "ts": 1.5,
     "dur": 2, "args": {"device": 2**31}},
    {"ph": "X", "cat": "kernel", "pid": "9223372036854775808", "tid": "", "ts": 1, "dur": 2,
     "args": {"correlation": 4}},
    {"ph": "X", "cat": "cpu_op", "pid": 3, "tid": "-", "ts": 1, "dur": 2, "args": {"device": -(2**31)}},
    {"ph": "f", "cat": "ac2g", "pid": "05", "tid": 7, "ts": 1.5, "id": 3},
    {"ph": "f", "cat": "ac2g", "pid": 1, "tid": 1, "ts": 1},
    {"ph": "X", "ts": "1", "dur": 2},
    {"ph": "X", "ts": 1},
]
"""What the generated events might miss: the ends of int64 and int32, ids missing, times as text."""


@_CASES
@example(events=_EDGES, indent=False)
@given(events=st.lists(st.one_of(_KINETO_EVENT, _EXPORTED), max_size=24), indent=st.booleans())
def test_the_scanners_own_reduction_keeps_what_kineto_keeps_of_its_raw_events(
    events: list, indent: bool
) -> None:
    text, start, end = _text(events, indent)
    raw = columnar._scanned(text, start, end)
    assert raw is not None

    scanned = kineto._scan_slice(text, start, end)

    expected = kineto._reduce(raw)
    assert scanned is not None
    assert scanned.events.equals(expected.events)
    assert scanned.flows.equals(expected.flows)
    assert scanned.untimed == expected.untimed


def test_the_scanners_own_reduction_refuses_what_the_raw_scan_refuses() -> None:
    text = b'{"traceEvents": [{"ph": "X", "name": 5, "ts": 1, "dur": 2}]}'
    start = text.index(b"[") + 1

    assert columnar._scanned(text, start, len(text) - 2) is None
    assert kineto._scan_slice(text, start, len(text) - 2) is None
