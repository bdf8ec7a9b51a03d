"""The column readers (the event scanner, polars' sliced reader) and the Python-object reader agree
on real traces, false cuts included."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import polars as pl
import pytest

from tracekit.trace import columnar
from tracekit.trace.columnar import RAW_SCHEMA, read_columnar, read_objects
from tracekit.trace.kineto import read_trace

SHARED_TRACES = [
    "deepseek-v3-dualpipe-chunk/train.json.gz",
    "hta-sampled-2rank/sampled_rank-0.json.gz",
    "param-dlrm-8rank/worker3_step_12.1694128201557.pt.trace.json.gz",
]


@pytest.fixture(params=["event scanner", "polars slices"])
def column_reader(request, monkeypatch) -> str:
    """Each column reader in turn: the polars one is what runs where the scanner is not built."""
    if request.param == "polars slices":
        monkeypatch.setattr(columnar, "_eventscan", None)
    return request.param


@pytest.fixture
def sliced(monkeypatch) -> None:
    """Polars' sliced reader alone, for what only it does (cuts, batches)."""
    monkeypatch.setattr(columnar, "_eventscan", None)


def test_the_event_scanner_is_built() -> None:
    assert columnar._eventscan is not None, "tracekit/trace/_eventscan.c was not compiled at install"


def _both(text: bytes) -> tuple[pl.DataFrame, pl.DataFrame]:
    fast = read_columnar(text, lambda frame: frame)
    assert fast is not None, "the column reader refused a real trace"
    slow_header, slow = read_objects(text, "trace")
    assert fast[0] == slow_header
    return pl.concat(fast[1]), slow


@pytest.mark.parametrize("name", SHARED_TRACES)
def test_readers_agree_on_real_traces(shared: Path, name: str, monkeypatch, column_reader: str) -> None:
    text = gzip.decompress((shared / "traces" / name).read_bytes())
    monkeypatch.setattr(columnar, "_CHUNK_BYTES", 20_000)  # many slices, even in a small file

    fast, slow = _both(text)

    assert dict(fast.schema) == RAW_SCHEMA and fast.equals(slow)


def test_false_cut_inside_an_event_is_widened(shared: Path, monkeypatch, column_reader: str) -> None:
    document = orjson.loads(gzip.decompress((shared / "traces" / SHARED_TRACES[0]).read_bytes()))
    for event in document["traceEvents"][::50]:
        event["name"] = "odd},{name"  # a cut candidate inside a string, every 50 events
    text = orjson.dumps(document)
    monkeypatch.setattr(columnar, "_CHUNK_BYTES", 5_000)

    fast, slow = _both(text)

    assert fast.equals(slow)
    assert fast.filter(pl.col("name") == "odd},{name").height == len(document["traceEvents"][::50])


def test_fields_of_unexpected_type_read_as_by_objects(shared: Path, tmp_path: Path, column_reader: str) -> None:
    document = orjson.loads(gzip.decompress((shared / "traces" / SHARED_TRACES[0]).read_bytes()))
    kernels = [event for event in document["traceEvents"] if event.get("cat") == "kernel"]
    kernels[0]["args"] = "not an object"
    kernels[1]["ts"] = "12:00"
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps(document))

    columns = read_columnar(path.read_bytes(), lambda frame: frame)
    if column_reader == "polars slices":
        assert columns is None  # the misfit fields leave the text to the object reader
    else:
        assert columns is not None and pl.concat(columns[1]).equals(read_objects(path.read_bytes(), path)[1])
    events, _ = read_trace(path)

    gpu = events.filter(pl.col("cat") == "kernel")
    assert gpu.height == len(kernels) - 1  # the kernel without a time is no complete event
    assert gpu["correlation"].null_count() == 0  # the one without args got its id from its ac2g flow


def test_batched_reduce_and_false_cuts_beyond_the_decode_window(shared: Path, monkeypatch, sliced: None) -> None:
    document = orjson.loads(gzip.decompress((shared / "traces" / SHARED_TRACES[0]).read_bytes()))
    events = document["traceEvents"]
    for event in events[::200]:  # a run of false cuts longer than the slices decoded ahead
        event.setdefault("args", {})["shapes"] = [{"dim": dim} for dim in range(2_000)]
    text = orjson.dumps(document)
    monkeypatch.setattr(columnar, "_CHUNK_BYTES", 2_000)
    monkeypatch.setattr(columnar, "_REDUCE_BYTES", 8_000)  # a window of a few slices, many batches
    batches = read_columnar(text, lambda frame: frame)
    assert batches is not None and len(batches[1]) > 1

    fast, slow = _both(text)

    assert fast.equals(slow) and fast.height == len(events)


def test_integer_fields_written_as_text_read_as_before_in_every_reader(
    shared: Path, monkeypatch, column_reader: str
) -> None:
    document = orjson.loads(gzip.decompress((shared / "traces" / SHARED_TRACES[1]).read_bytes()))
    events = document["traceEvents"]
    for index, event in enumerate(events[::40]):  # a text id in some slices: those decode as text, then cast
        args = event.setdefault("args", {})
        args["correlation"] = "12" if index % 2 else "not a number"
        event["pid"] = "Spans"
    text = orjson.dumps(document)
    monkeypatch.setattr(columnar, "_CHUNK_BYTES", 20_000)

    fast, slow = _both(text)

    assert dict(fast.schema) == RAW_SCHEMA and fast.equals(slow)
    changed = fast.gather(list(range(0, len(events), 40)))
    assert set(changed["correlation"].to_list()) == {12, None}
    assert changed["pid"].to_list() == ["Spans"] * changed.height
    ids = fast["correlation"].drop_nulls()
    assert ids.dtype == pl.Int64 and ids.len() > 1000


@pytest.fixture
def small_parts(monkeypatch) -> None:
    """Reading from disk with parts, cut reach and edges a few kilobytes long, so a small trace has many."""
    monkeypatch.setattr(columnar, "_SCAN_BYTES", 20_000)
    monkeypatch.setattr(columnar, "_CUT_BYTES", 64)
    monkeypatch.setattr(columnar, "_EDGE_BYTES", 4_096)


def _from_disk(path: Path) -> tuple[dict, pl.DataFrame] | None:
    with path.open("rb") as handle:
        read = columnar.read_columnar_file(handle, path.stat().st_size, lambda frame: frame)
    return None if read is None else (read[0], pl.concat(read[1]))


@pytest.mark.parametrize("name", SHARED_TRACES)
def test_a_trace_read_from_disk_in_parts_reads_as_the_whole_text(
    shared: Path, name: str, tmp_path: Path, small_parts: None
) -> None:
    text = gzip.decompress((shared / "traces" / name).read_bytes())
    path = tmp_path / "rank0.json"
    path.write_bytes(text)

    read = _from_disk(path)

    assert read is not None
    header, whole = read_objects(text, "trace")
    assert read[0] == header and read[1].equals(whole)


def test_false_cuts_between_nested_objects_and_in_strings_are_read_again(
    tmp_path: Path, small_parts: None
) -> None:
    events = [
        {"ph": "X", "name": "odd},{name" if i % 7 == 0 else f"op{i}", "ts": i, "dur": 1, "pid": 0, "tid": 0,
         "args": {"shapes": [{"a": i}, {"b": i}], "correlation": i}}
        for i in range(3_000)
    ]  # fmt: skip
    text = orjson.dumps({"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"})
    path = tmp_path / "rank0.json"
    path.write_bytes(text)

    read = _from_disk(path)

    assert read is not None and read[1].equals(read_objects(text, "trace")[1])


def test_what_the_scanner_refuses_from_disk_is_left_to_the_whole_text(
    tmp_path: Path, monkeypatch, small_parts: None
) -> None:
    events = [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1, "pid": 0, "tid": 0} for i in range(3_000)]
    events[2_500]["args"] = {"correlation": "12"}  # an integer field holding text, far into the file
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    monkeypatch.setattr("tracekit.trace.kineto.FROM_DISK_BYTES", 1_000)

    assert _from_disk(path) is None
    frame, info = read_trace(path)  # the whole text, by the next reader
    assert info.event_count == 3_000 and frame["correlation"].drop_nulls().to_list() == [12]

    path.write_bytes(orjson.dumps({"traceEvents": events})[:-40])  # cut short: no end of the array
    assert _from_disk(path) is None


def test_a_large_plain_trace_is_read_from_disk_into_the_same_table(
    shared: Path, tmp_path: Path, monkeypatch, small_parts: None
) -> None:
    text = gzip.decompress((shared / "traces" / SHARED_TRACES[0]).read_bytes())
    plain, packed = tmp_path / "plain" / "rank0.json", tmp_path / "packed" / "rank0.json.gz"
    for path, data in ((plain, text), (packed, gzip.compress(text))):
        path.parent.mkdir()
        path.write_bytes(data)
    monkeypatch.setattr("tracekit.trace.kineto.FROM_DISK_BYTES", 1_000)
    calls = []
    real = columnar.read_columnar_file
    monkeypatch.setattr(
        "tracekit.trace.kineto.read_columnar_file", lambda *args: calls.append(args[1]) or real(*args)
    )

    from_disk, whole = read_trace(plain), read_trace(packed)

    assert calls == [len(text)]  # the plain file alone, read from disk
    assert from_disk[0].equals(whole[0])
    assert from_disk[1].run_id == whole[1].run_id and from_disk[1].event_count == whole[1].event_count
