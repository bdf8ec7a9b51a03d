"""Reading one Kineto trace: real GPU traces, small real CPU traces, and every kind of bad file."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest

from tracekit.errors import TracekitError
from tracekit.trace.kineto import read_trace
from tracekit.trace.schema import EVENT_SCHEMA


def test_reads_real_nccl_trace(shared: Path) -> None:
    path = next((shared / "traces" / "param-dlrm-8rank").glob("worker3_*.json.gz"))

    events, info = read_trace(path)

    assert dict(events.schema) == EVENT_SCHEMA
    assert (info.rank, info.world_size, info.backend) == (3, 8, "nccl")
    kernels = events.filter(pl.col("cat") == "kernel")
    assert kernels.height > 100
    assert kernels["stream"].null_count() == 0 and kernels["correlation"].null_count() == 0
    assert events["dur_ns"].min() >= 0


def test_cpu_trace_times_are_absolute_ns(tmp_path: Path, make_trace) -> None:
    path = make_trace(tmp_path / "rank0.json", ["tracekit:0F0", "tracekit:0B0"])

    events, info = read_trace(path)

    labels = events.filter(pl.col("cat") == "user_annotation").sort("start_ns")
    assert labels["name"].to_list() == ["tracekit:0F0", "tracekit:0B0"]
    assert info.base_ns > 0
    # baseTimeNanoseconds is added: times are wall-clock epoch nanoseconds (after 2020).
    assert labels["start_ns"][0] > 1_577_836_800 * 10**9
    assert labels["start_ns"][1] >= labels["start_ns"][0] + labels["dur_ns"][0]


def test_rank_from_file_name_when_no_distributed_info(tmp_path: Path, make_trace) -> None:
    path = make_trace(tmp_path / "rank5.json.gz", ["x"], rank=None)

    _, info = read_trace(path)

    assert (info.rank, info.world_size, info.rank_source) == (5, None, "file name")


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        (b"", "empty file"),
        (gzip.compress(b'{"traceEvents": [' * 50)[:40], "truncated or corrupt gzip"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1', "not valid JSON"),
        (b"[1, 2, 3]", "no traceEvents list"),
        (b'{"traceEvents": [], "distributedInfo": {"rank": 0, "world_size": 1}}', "no complete"),
    ],
    ids=["empty", "truncated-gzip", "truncated-json", "not-a-trace", "no-events"],
)
def test_bad_file_gets_one_line_error_naming_file(tmp_path: Path, content: bytes, fault: str) -> None:
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(content)

    with pytest.raises(TracekitError) as raised:
        read_trace(path)

    message = str(raised.value)
    assert message.startswith(str(path)) and fault in message and "\n" not in message


def test_no_rank_anywhere_is_an_error(tmp_path: Path, make_trace) -> None:
    path = make_trace(tmp_path / "trace.json", ["x"], rank=None)

    with pytest.raises(TracekitError, match="no distributedInfo and no rank in the file name"):
        read_trace(path)
