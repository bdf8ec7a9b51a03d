"""A Prometheus port that cannot be bound is one line before the job starts, never a traceback
after it, and an aggregator that fails is one line of its own."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from record_runs import TRACEKIT, run

from tracekit.live.metrics import LiveMetrics


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A TCP port another process listens on."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    try:
        yield holder.getsockname()[1]
    finally:
        holder.close()


def test_a_taken_port_is_one_line_and_the_job_does_not_run(tmp_path: Path, taken_port: int) -> None:
    marker = tmp_path / "ran"
    job = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]

    done = run([*TRACEKIT, "record", "--out", str(tmp_path / "live"), "--live",
                "--prometheus-port", str(taken_port), "--", *job], timeout_s=60)  # fmt: skip

    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert f"cannot serve the Prometheus metrics on port {taken_port}: address already in use" in done.stderr
    assert not marker.exists()


def test_the_aggregators_endpoint_on_a_taken_port_is_one_line(taken_port: int) -> None:
    with pytest.raises(SystemExit) as failed:
        LiveMetrics(taken_port)

    message = str(failed.value.code)
    assert "\n" not in message and message.startswith("tracekit: live aggregator: cannot serve")
