"""The profiler's memory events read into their typed table, from real and hand-written traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracekit.errors import TracekitError
from tracekit.trace.memory_events import MEMORY_EVENT_SCHEMA, read_memory_events


def _trace(path: Path, events: list[dict], memory: bool = True) -> Path:
    # Kineto writes its header keys, profile_memory among them, before traceEvents.
    document = {"baseTimeNanoseconds": 1_000_000_000, **({"profile_memory": 1} if memory else {})}
    document["traceEvents"] = events
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    return path


def _event(ts: float, nbytes: int, total: int, addr: int = 7, device_type: int = 0) -> dict:
    args = {"Total Reserved": 0, "Total Allocated": total, "Bytes": nbytes, "Device Id": -1,
            "Device Type": device_type, "Addr": addr}
    return {"ph": "i", "name": "[memory]", "ts": ts, "pid": 1, "tid": 1, "args": args}


def test_events_become_typed_rows_on_the_event_tables_clock(tmp_path: Path) -> None:
    path = _trace(tmp_path / "rank0.json.gz", [_event(2.5, 64, 64), _event(1.0, 32, 32, addr=8)])
    memory = read_memory_events(path, 0)
    assert memory.recorded and dict(memory.events.schema) == MEMORY_EVENT_SCHEMA
    assert memory.events["ts_ns"].to_list() == [1_000_001_000, 1_000_002_500]
    assert memory.events["bytes"].to_list() == [32, 64]


def test_a_trace_without_profile_memory_is_not_recorded(tmp_path: Path) -> None:
    memory = read_memory_events(_trace(tmp_path / "rank0.json.gz", [], memory=False), 0)
    assert not memory.recorded and memory.events.is_empty()


def test_events_at_or_after_the_cut_are_left_out(tmp_path: Path) -> None:
    path = _trace(tmp_path / "rank0.json.gz", [_event(1.0, 32, 32), _event(5.0, 8, 40)])
    assert read_memory_events(path, 0, cut_ns=1_000_005_000).events.height == 1


def test_a_memory_event_without_bytes_names_the_file(tmp_path: Path) -> None:
    broken = _event(1.0, 32, 32)
    del broken["args"]["Bytes"]
    path = _trace(tmp_path / "rank0.json.gz", [broken])
    with pytest.raises(TracekitError, match="rank0.json.gz"):
        read_memory_events(path, 0)


def test_bundled_samples_recorded_no_memory() -> None:
    sample = Path(__file__).parents[2] / "sample_traces" / "1f1b" / "rank0.json.gz"
    assert not read_memory_events(sample, 0).recorded
