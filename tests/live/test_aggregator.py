"""The aggregator's state over thousands of steps: intervals judged in order, memory bounded."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from live_samples import summaries_of

from collectors import live_wire
from tracekit.live.aggregator import LOG_NAME, MAX_OPEN_INTERVALS, Aggregator
from tracekit.live.assess import LiveConfig
from tracekit.live.summaries import StepSummary


def _message(summary: StepSummary) -> bytes:
    return live_wire.encode(
        {
            "t": "step",
            "v": 1,
            "r": summary.rank,
            "w": summary.world_size,
            "h": summary.host,
            "p": summary.pid,
            "s": summary.step,
            "t0": summary.start_ns,
            "d": summary.duration_ns,
            "c": 0,
            "clk": "cpu",
            "cap": 0,
            "x": 0,
            "a": [list(a) for a in summary.actions],
        }  # fmt: skip
    )


def _steps(sample_actions: pl.DataFrame, count: int, silent_rank_from: int | None = None) -> Iterator[bytes]:
    """``count`` steps, each a copy of the sample's step 1 shifted in time."""
    template = [s for s in summaries_of(sample_actions) if s.step == 1]
    span = max(s.duration_ns for s in template) * 2
    for step in range(count):
        for summary in template:
            if silent_rank_from is not None and summary.rank == 3 and step >= silent_rank_from:
                continue
            yield _message(replace(summary, step=step, start_ns=summary.start_ns + step * span))


@pytest.fixture
def aggregator(tmp_path: Path) -> Iterator[Aggregator]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    # The address the ranks "send from" is this same socket: the acks go nowhere harmful.
    config = LiveConfig(interval_steps=100, capture_steps=0)
    agg = Aggregator(sock, tmp_path, config, console=None)
    agg.address = sock.getsockname()
    yield agg
    sock.close()


def test_thousands_of_steps_are_judged_interval_by_interval_in_bounded_memory(
    aggregator: Aggregator, sample_actions: pl.DataFrame
) -> None:
    most = 0
    for data in _steps(sample_actions, 1_002):
        aggregator.receive(data, aggregator.address, now_s=0.0)
        aggregator.tick(0.0)
        most = max(most, sum(len(v) for v in aggregator.open_intervals.values()))
    aggregator.finish()
    records = [json.loads(line) for line in (aggregator.out_dir / LOG_NAME).read_text().splitlines()]
    intervals = [r for r in records if r["type"] == "interval"]
    assert [r["first_step"] for r in intervals] == list(range(1, 1_001, 100))
    assert all(r["steps_judged"] == 100 for r in intervals)
    assert most <= 4 * (100 + 1)  # one interval of summaries and the first step of the next


def test_a_rank_that_falls_silent_cannot_make_the_aggregator_hoard(
    aggregator: Aggregator, sample_actions: pl.DataFrame
) -> None:
    for data in _steps(sample_actions, 1_002, silent_rank_from=150):
        aggregator.receive(data, aggregator.address, now_s=0.0)
        aggregator.tick(0.0)
        assert len(aggregator.open_intervals) <= MAX_OPEN_INTERVALS + 1
    assert aggregator.judged_through >= 4


def test_datagrams_that_are_not_summaries_are_counted_and_ignored(aggregator: Aggregator) -> None:
    for data in (b"\x00garbage", b'{"t": "step", "v": 1}', b'{"t": "hello"}'):
        aggregator.receive(data, aggregator.address, now_s=0.0)
    assert aggregator.refused == 3 and aggregator.ranks == {}


def test_ranks_that_exit_together_are_reported_lost_in_the_order_they_exited(
    aggregator: Aggregator, tmp_path: Path
) -> None:
    # Three real processes stand for three ranks on this host: rank 1 dies first, the others 0.4 s
    # later, as a crash's peers do once their collectives fail. None says goodbye.
    delays = {0: 0.4, 1: 0.0, 2: 0.4}
    ranks = {rank: subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({d})"]) for rank, d in delays.items()}
    here = socket.gethostname()
    for rank, process in ranks.items():
        summary = StepSummary(rank, 3, here, process.pid, 0, 0, 1, 0, "cpu", False, 0, ((rank, "F", 0, 0, 1, False),))
        aggregator.receive(_message(summary), aggregator.address, time.monotonic())
    deadline = time.monotonic() + 30
    while aggregator.exit_fds() and time.monotonic() < deadline:
        watched = aggregator.exit_fds()
        ready, _, _ = select.select(list(watched), [], [], 0.05)
        for fd in ready:
            aggregator.exited(watched[fd], time.monotonic())
    for process in ranks.values():
        process.wait()
    aggregator.finish()

    records = [json.loads(line) for line in (tmp_path / LOG_NAME).read_text().splitlines()]
    lost = [r["rank"] for r in records if r["type"] == "rank_lost"]
    assert lost[0] == 1 and sorted(lost) == [0, 1, 2], records
    assert all("exited without saying goodbye" in r["reason"] for r in records if r["type"] == "rank_lost")
