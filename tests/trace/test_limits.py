"""The reader's size limit: a gzip bomb or an oversized file is refused in one line, cheaply.

The bombs are real gzip files: members of compressed blank text, back to back (a gzip file may hold
many members; every reader decompresses them all), so a file of kilobytes inflates to hundreds of MB.
"""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import orjson
import polars as pl
import pytest

from tracekit.errors import TracekitError
from tracekit.trace.kineto import MAX_TRACE_MB_DEFAULT, MAX_TRACE_MB_VARIABLE, read_bytes, read_trace

_BLANK_MEMBER = gzip.compress(b" " * (16 << 20), 9)
"""16 MiB of spaces as one gzip member (about 16 KB)."""
_EVENT = orjson.dumps(
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2.0,
     "args": {"correlation": 1, "stream": 7, "device": 0}}
)


def _bomb(path: Path, megabytes: int) -> Path:
    """A gzip of a trace whose events array holds ``megabytes`` MiB of blanks, in a few KB."""
    head = gzip.compress(b'{"distributedInfo": {"rank": 0}, "traceEvents": [' + _EVENT + b",")
    tail = gzip.compress(_EVENT + b"]}")
    path.write_bytes(head + _BLANK_MEMBER * (megabytes // 16) + tail)
    return path


def test_a_gzip_bomb_is_refused_at_the_limit_in_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(MAX_TRACE_MB_VARIABLE, "32")
    path = _bomb(tmp_path / "rank0.json.gz", 256)
    assert path.stat().st_size < 300_000

    started = time.process_time()
    with pytest.raises(TracekitError) as error:
        read_trace(path)

    assert time.process_time() - started < 5  # it stopped at 32 MiB, not after 256
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: decompresses to more than 32 MiB")
    assert MAX_TRACE_MB_VARIABLE in message


def test_a_plain_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(MAX_TRACE_MB_VARIABLE, "0.5")
    path = tmp_path / "rank0.json"
    path.write_bytes(b'{"traceEvents": [' + b" " * (1 << 20) + _EVENT + b"]}")

    with pytest.raises(TracekitError, match=r"rank0.json: holds more than 0.5 MiB of JSON"):
        read_bytes(path)


def test_a_trace_under_the_limit_reads_blank_runs_and_members_included(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(MAX_TRACE_MB_VARIABLE, "200")
    path = _bomb(tmp_path / "rank0.json.gz", 96)  # a valid trace: two events around 96 MiB of blanks

    events, info = read_trace(path)

    assert info.rank == 0 and events.height == 2
    assert events.filter(pl.col("cat") == "kernel")["start_ns"].to_list() == [1500, 1500]


def test_a_bad_limit_setting_is_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(MAX_TRACE_MB_VARIABLE, "lots")
    path = tmp_path / "rank0.json"
    path.write_bytes(b'{"traceEvents": [' + _EVENT + b"]}")

    with pytest.raises(TracekitError, match=f"{MAX_TRACE_MB_VARIABLE}='lots': expected a positive number"):
        read_bytes(path)


@pytest.mark.slow
def test_the_command_refuses_a_bomb_past_the_default_limit_in_bounded_memory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _bomb(run / "rank0.json.gz", 1024)  # 1 GiB of blanks in about 1 MB, twice the default limit
    environment = {key: value for key, value in os.environ.items() if key != MAX_TRACE_MB_VARIABLE}

    done = subprocess.run(
        [sys.executable, "-m", "tracekit", "report", str(run)],
        capture_output=True, text=True, env=environment, timeout=300,
    )

    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"decompresses to more than {MAX_TRACE_MB_DEFAULT} MiB" in lines[0]
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert peak_mib < 2.5 * MAX_TRACE_MB_DEFAULT  # the text up to the limit, not the whole GiB twice
