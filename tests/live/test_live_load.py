"""The live aggregator at 2,048 ranks' summary rate, over real loopback UDP: every summary is read
or counted as dropped by the socket (``dropped_in_socket`` in live.jsonl's end record), the alerts
are those of the same pipeline at 4 ranks (a summary the socket dropped raises none), and its
memory stays bounded. The ranks are simulated (512 replicas of the committed 4-rank 1F1B capture's
summaries); the aggregator is the real process ``tracekit record --live`` starts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from live_samples import SAMPLE_1F1B, summaries_of

from collectors import live_wire
from tracekit.run_analysis import realized_actions
from tracekit.live.aggregator import LOG_NAME
from tracekit.trace.run import load_run

pytestmark = pytest.mark.slow

STEPS = 11
"""Steps each rank sends: two judged intervals of 5 (steps 1-10), then the goodbye."""
STEP_S = 0.25
"""Seconds between steps: 2,048 ranks at a 250 ms step send 8,192 summaries a second."""
MEMORY_BOUND_MIB = 1024


@dataclass(frozen=True)
class Fed:
    """What the aggregator wrote after ``ranks`` simulated ranks fed it."""

    records: list[dict]
    sent: int
    peak_rss_mib: float
    cpu_s: float
    """The aggregator's CPU seconds (user + system) up to the goodbyes."""
    seconds: float


def _messages(template: list, ranks: int, step: int) -> list[tuple[int, bytes]]:
    by_rank = {summary.rank: summary for summary in template}
    span = max(summary.duration_ns for summary in template) * 2
    out = []
    for rank in range(ranks):
        summary = by_rank[rank % 4]
        group = list(range(rank - rank % 4, rank - rank % 4 + 4))
        out.append((rank, live_wire.encode({
            "t": "step", "v": 1, "r": rank, "w": ranks, "h": f"host-{rank // 8}", "p": 10_000 + rank,
            "s": step, "t0": summary.start_ns + step * span, "d": summary.duration_ns, "c": 0,
            "clk": "cpu", "cap": 0, "x": 0, "pg": group,
            "a": [list(action) for action in summary.actions],
            "sw": [list(work) for work in summary.stage_work],
        })))  # fmt: skip
    return out


def _feed(out_dir: Path, ranks: int, template: list) -> Fed:
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # as tracekit record binds it
    listener.bind(("127.0.0.1", 0))
    address = listener.getsockname()
    aggregator = subprocess.Popen(
        [sys.executable, "-m", "tracekit.live.aggregator", "--fd", str(listener.fileno()), "--out", str(out_dir),
         "--run-id", "load", "--interval", "5", "--persist", "2", "--capture-steps", "0",
         "--capture-period", "0", "--threshold", "0.8", "--view", "off", "--parent-pid", str(os.getpid())],
        pass_fds=(listener.fileno(),),
    )  # fmt: skip
    listener.close()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent, started, peak, cpu_s = 0, time.monotonic(), 0.0, 0.0
    try:
        time.sleep(2.0)  # the aggregator's start-up
        for step in range(STEPS):
            due = time.monotonic() + STEP_S
            for _, data in _messages(template, ranks, step):
                sender.sendto(data, address)
                sent += 1
            time.sleep(max(0.0, due - time.monotonic()))
        for rank in range(ranks):
            sender.sendto(live_wire.encode({"t": "bye", "r": rank, "s": STEPS, "x": 0}), address)
            sent += 1
        time.sleep(1.0)
        status = Path(f"/proc/{aggregator.pid}/status").read_text()
        peak = int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]) / 1024
        ticks = Path(f"/proc/{aggregator.pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13]
        cpu_s = sum(map(int, ticks)) / os.sysconf("SC_CLK_TCK")
        aggregator.send_signal(signal.SIGTERM)
        aggregator.wait(timeout=120)
    finally:
        sender.close()
        if aggregator.poll() is None:
            aggregator.kill()
    records = [json.loads(line) for line in (out_dir / LOG_NAME).read_text().splitlines()]
    return Fed(records, sent, peak, cpu_s, time.monotonic() - started)


@pytest.fixture(scope="module")
def template() -> list:
    actions: pl.DataFrame = realized_actions(load_run(SAMPLE_1F1B, workers=1))
    return [summary for summary in summaries_of(actions) if summary.step == 1]


@pytest.fixture(scope="module")
def at_scale(tmp_path_factory: pytest.TempPathFactory, template: list) -> Fed:
    return _feed(tmp_path_factory.mktemp("live-2048"), 2048, template)


@pytest.fixture(scope="module")
def at_four(tmp_path_factory: pytest.TempPathFactory, template: list) -> Fed:
    return _feed(tmp_path_factory.mktemp("live-4"), 4, template)


def test_no_summary_is_lost_uncounted(at_scale: Fed) -> None:
    end = next(record for record in at_scale.records if record["type"] == "end")

    received = sum(rank["received"] for rank in end["ranks"]) + sum(rank["done"] for rank in end["ranks"])
    # Every datagram (summaries and goodbyes) was read, or the socket counted it as dropped.
    assert received + end["dropped_in_socket"] == at_scale.sent
    assert end["refused_datagrams"] == 0 and end["late_summaries"] == 0


def test_the_alerts_are_those_of_the_same_pipeline_at_four_ranks(at_scale: Fed, at_four: Fed) -> None:
    def alerted(fed: Fed) -> set[tuple[int, str]]:
        return {(alert["stage"], alert["kind"]) for alert in fed.records if alert["type"] == "alert"}

    assert alerted(at_scale) == alerted(at_four)


def test_the_aggregators_memory_stays_bounded(at_scale: Fed) -> None:
    assert 0 < at_scale.peak_rss_mib < MEMORY_BOUND_MIB
