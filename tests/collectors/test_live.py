"""The rank side of live mode: summaries the aggregator can read, never a wait, drops counted."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from collectors import live, live_wire
from tracekit.live.summaries import parse_summary


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    yield sock
    sock.close()


def _timer(address: str) -> live.LiveTimer:
    return live.LiveTimer(address, lambda: (1, 4))


def test_a_step_summary_carries_every_action_in_the_aggregators_format(listener: socket.socket) -> None:
    timer = _timer("%s:%d" % listener.getsockname())
    timer.begin_step(7)
    with timer.action(1, "F", 0):
        time.sleep(0.002)
    with timer.comm():
        time.sleep(0.001)
    with timer.pair((1, 2), (6, "B", 0)):  # halves not timed apart: both span the pair
        time.sleep(0.001)
    timer.end_step(7)
    summary = parse_summary(live_wire.decode(listener.recv(65536)))
    assert (summary.rank, summary.world_size, summary.step, summary.clock) == (1, 4, 7, "cpu")
    assert [(s, k, m, o) for s, k, m, _, _, o in summary.actions] == [
        (1, "F", 0, False), (1, "F", 2, True), (6, "B", 0, True)
    ]  # fmt: skip
    forward = summary.actions[0]
    assert forward[4] - forward[3] >= 2_000_000
    assert summary.comm_ns >= 1_000_000 and summary.duration_ns >= forward[4]
    assert summary.actions[1][3:5] == summary.actions[2][3:5]


def test_a_described_schedule_sends_its_stage_work_group_and_class(listener: socket.socket) -> None:
    work = SimpleNamespace(stage=1, params=10, embedding_params=0, layers=2)
    info = SimpleNamespace(stage_work=(work,), pipeline_group=(0, 1, 2, 3), class_name="DualPipe")
    timer = _timer("%s:%d" % listener.getsockname())
    timer.begin_step(0, describe=lambda: info)
    timer.end_step(0)
    summary = parse_summary(live_wire.decode(listener.recv(65536)))
    assert (summary.stage_work, summary.pipeline_group, summary.schedule_class) == (
        ((1, 10, 0, 2),), (0, 1, 2, 3), "DualPipe"
    )


def test_actions_inside_a_pair_are_its_halves(listener: socket.socket) -> None:
    timer = _timer("%s:%d" % listener.getsockname())
    timer.begin_step(0)
    with timer.pair((0, 3), (7, "B", 1)):
        with timer.action(0, "F", 3):
            pass
        with timer.action(7, "B", 1):
            pass
    with timer.action(0, "F", 4):
        pass
    timer.end_step(0)
    summary = parse_summary(live_wire.decode(listener.recv(65536)))
    assert [(s, k, m, o) for s, k, m, _, _, o in summary.actions] == [
        (0, "F", 3, True), (7, "B", 1, True), (0, "F", 4, False)
    ]  # fmt: skip


def test_with_nobody_listening_steps_never_wait_and_drops_are_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        address = "%s:%d" % probe.getsockname()
    timer = _timer(address)  # the port is closed again: nothing listens there
    started = time.perf_counter()
    for step in range(2_000):
        timer.begin_step(step)
        with timer.action(0, "F", 0):
            pass
        timer.end_step(step)
    assert time.perf_counter() - started < 5
    assert timer.dropped > 0 and timer.sent + timer.dropped == 2_000
    assert len(timer._actions) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tracekit: rank 1:")]
    assert len(warnings) == 1, warnings


class _FakeEvent:
    """A CUDA event on a machine without a GPU: completes ``delay`` queries after it is recorded."""

    clock = 0
    delay = 0

    def __init__(self, enable_timing: bool = True) -> None:
        self.at = 0
        self.queries = 0

    def record(self) -> None:
        _FakeEvent.clock += 1_000
        self.at, self.queries = _FakeEvent.clock, 0  # re-recorded: pending again

    def query(self) -> bool:
        self.queries += 1
        return self.queries > _FakeEvent.delay

    def elapsed_time(self, other: _FakeEvent) -> float:
        return (other.at - self.at) / 1e3  # ms


@pytest.mark.parametrize("delay", [0, 1, 100])
def test_gpu_steps_are_read_back_once_their_events_complete_and_never_pile_up(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch, delay: int
) -> None:
    monkeypatch.setattr(live.torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(_FakeEvent, "delay", delay)
    timer = _timer("%s:%d" % listener.getsockname())
    timer._cuda = True
    for step in range(10):
        timer.begin_step(step)
        with timer.action(0, "F", step):
            pass
        timer.end_step(step)
        assert len(timer._pending) <= live.MAX_PENDING_GPU_STEPS
    listener.settimeout(0.5)
    received = []
    while True:
        try:
            received.append(parse_summary(live_wire.decode(listener.recv(65536))))
        except TimeoutError:
            break
    if delay == 100:  # events that never complete in time are dropped, not waited for
        assert received == [] and timer.dropped == 10 - live.MAX_PENDING_GPU_STEPS
    else:
        assert [s.step for s in received] == list(range(10 - delay))
        assert all(s.clock == "cuda" and s.actions[0][4] - s.actions[0][3] == 1_000_000 for s in received)
