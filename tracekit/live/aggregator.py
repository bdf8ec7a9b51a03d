"""The live aggregator: receive the ranks' step summaries, judge each interval, report, ask for captures.

``tracekit record --live`` binds the UDP socket, starts this as its own process
(``python -m tracekit.live.aggregator --fd N ...``) and stops it with SIGTERM once the job has
exited. Killing it never touches the job: ranks drop and count their summaries. It exits by
itself when the process that started it is gone, so it is never orphaned.

Each interval (``LiveConfig.interval_steps`` steps) closes once every active rank has reported a
step beyond it; it is judged by ``tracekit.live.assess`` and its alerts come from
``tracekit.live.tracker``. Outputs, one record per event appended to ``DIR/live.jsonl``
(schema in docs/live.md): ``start``, ``interval``, ``alert``, ``capture``, ``rank_lost``, ``end``.
A rank is lost when its process is gone (ranks on this host) or when it has been silent for longer
than an interval takes; either is reported within one interval. A rank on this host is watched
through a pidfd, so its exit is seen the moment it happens: when a crash takes the whole job down
within milliseconds (its peers' collectives fail, the launcher ends the rest), the ranks that exited
without a goodbye are reported lost in the order their exits were seen (ties, exits seen in one
turn of the loop, by rank), before the ``end`` record.

Memory is bounded: summaries are held only for intervals not yet judged, at most
``MAX_OPEN_INTERVALS`` of them.

Not for scoring (``tracekit.live.assess``) or rendering (``tracekit.live.view``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from collectors import live_wire
from collectors.merge import write_manifest
from tracekit.errors import TracekitError
from tracekit.live.assess import IntervalAssessment, LiveConfig, assess_interval
from tracekit.live.summaries import StepSummary, parse_summary
from tracekit.live.tracker import CAPTURE_LEAD_STEPS, CaptureRequest, Tracker
from tracekit.live.view import event_line, interval_view
from tracekit.stragglers.scoring import StragglerConfig

LOG_NAME = "live.jsonl"
MAX_OPEN_INTERVALS = 4
"""Intervals waiting for a late rank; beyond this the oldest is judged with what it has."""
SILENT_BEFORE_FIRST_INTERVAL_S = 30.0
"""Silence that makes a rank lost before any interval has told how long an interval takes."""
MIN_SILENT_S = 2.0
POLL_S = 0.2


@dataclass
class RankState:
    """What the aggregator knows of one rank."""

    address: Any
    host: str
    pid: int
    last_seen_s: float
    last_step: int = -1
    dropped: int = 0
    """Summaries the rank could not send (its own count)."""
    received: int = 0
    """Summaries that arrived here."""
    steps: int | None = None
    """Steps the rank ran, from its goodbye (None until then)."""
    done: bool = False
    lost: bool = False
    exit_fd: int | None = None
    """A pidfd of the rank's process (ranks on this host, where Linux has pidfds); None: polled."""
    exited_s: float | None = None
    """When its process was seen to exit (``time.monotonic``); None while it runs or is not watched."""


@dataclass
class Aggregator:
    """The aggregator's state; ``receive`` and ``tick`` are its two entry points."""

    sock: socket.socket
    out_dir: Path
    config: LiveConfig
    console: Console | None
    run_id: str | None = None
    metrics: Any = None
    world_size: int | None = None
    ranks: dict[int, RankState] = field(default_factory=dict)
    open_intervals: dict[int, list[StepSummary]] = field(default_factory=dict)
    judged_through: int = -1
    tracker: Tracker = field(init=False)
    interval_s: float | None = None
    refused: int = 0
    alerts: int = 0
    late: int = 0
    socket_drops: int = 0
    """Datagrams the receive buffer dropped before they were read (Linux counts them; 0 elsewhere)."""
    _log: Any = None
    _pending_manifests: list[CaptureRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tracker = Tracker(self.config)
        self._log = open(self.out_dir / LOG_NAME, "a", encoding="utf-8")  # noqa: SIM115 - open for the session

    # -- output -------------------------------------------------------------------------------
    def write(self, record: dict[str, Any]) -> None:
        """Append one record to live.jsonl (flushed: the file is read while the job runs)."""
        self._log.write(json.dumps({**record, "time_unix_s": round(time.time(), 3)}) + "\n")
        self._log.flush()

    def say(self, renderable: Any) -> None:
        if self.console is not None:
            self.console.print(renderable)

    # -- input --------------------------------------------------------------------------------
    def receive(self, data: bytes, address: Any, now_s: float) -> None:
        """One datagram from a rank."""
        message = live_wire.decode(data)
        if message is None:
            self.refused += 1
            return
        if message["t"] == "bye":
            rank = message.get("r")
            state = self.ranks.get(rank) if isinstance(rank, int) else None
            if state is not None:
                state.done, state.steps, state.dropped = (
                    True,
                    int(message.get("s") or 0),
                    int(message.get("x") or 0),
                )
                if self.metrics is not None:
                    self.metrics.rank_down(rank)
            return
        if message["t"] != "step":
            self.refused += 1
            return
        try:
            summary = parse_summary(message)
        except ValueError:
            self.refused += 1
            return
        self._track_rank(summary, address, now_s)
        index = self.config.interval_of(summary.step)
        if index is None:
            return
        if index <= self.judged_through:
            self.late += 1
            return
        self.open_intervals.setdefault(index, []).append(summary)

    def _track_rank(self, summary: StepSummary, address: Any, now_s: float) -> None:
        self.world_size = max(self.world_size or 0, summary.world_size)
        state = self.ranks.get(summary.rank)
        if state is None:
            state = self.ranks[summary.rank] = RankState(address, summary.host, summary.pid, now_s)
            state.exit_fd = _watch_exit(summary.pid) if summary.host == socket.gethostname() else None
            self._send(address, {"t": "ack"})
        if state.lost:
            state.lost = False
            self.write({"type": "rank_back", "rank": summary.rank, "step": summary.step})
        state.address, state.last_seen_s = address, now_s
        state.last_step = max(state.last_step, summary.step)
        state.dropped = summary.dropped
        state.received += 1

    def _send(self, address: Any, message: dict[str, Any]) -> None:
        try:
            self.sock.sendto(live_wire.encode(message), address)
        except OSError:
            pass  # the rank is gone; it is reported lost when it stays silent

    # -- periodic work ------------------------------------------------------------------------
    def active(self) -> list[int]:
        """Ranks expected to keep reporting."""
        return [rank for rank, state in self.ranks.items() if not state.done and not state.lost]

    def tick(self, now_s: float) -> None:
        """Judge the intervals every active rank has passed; report lost ranks; merge finished captures."""
        self._find_lost(now_s)
        while self.open_intervals:
            index = min(self.open_intervals)
            last = self.config.interval_steps_of(index)[-1]
            everyone_in = self.world_size is not None and len(self.ranks) >= self.world_size
            # Done ranks count too: an interval the job ended inside waits for finish(), which skips it.
            passed = everyone_in and all(st.last_step > last for st in self.ranks.values() if not st.lost)
            if not passed and len(self.open_intervals) <= MAX_OPEN_INTERVALS:
                break
            self._judge(index, self.open_intervals.pop(index), now_s)
        self._merge_captures()

    def _silent_limit_s(self) -> float:
        return (
            SILENT_BEFORE_FIRST_INTERVAL_S if self.interval_s is None else max(MIN_SILENT_S, self.interval_s)
        )

    def exit_fds(self) -> dict[int, int]:
        """pidfd -> rank, of the watched ranks still expected to report."""
        return {
            state.exit_fd: rank
            for rank, state in self.ranks.items()
            if state.exit_fd is not None and state.exited_s is None and not (state.done or state.lost)
        }

    def exited(self, rank: int, now_s: float) -> None:
        """Rank ``rank``'s process has exited (its pidfd turned readable)."""
        state = self.ranks[rank]
        if state.exited_s is None:
            state.exited_s = now_s
        if state.exit_fd is not None:
            with contextlib.suppress(OSError):
                os.close(state.exit_fd)
            state.exit_fd = None

    def _find_lost(self, now_s: float) -> None:
        here = socket.gethostname()
        found: list[tuple[float, int, str]] = []
        for rank, state in self.ranks.items():
            if state.done or state.lost:
                continue
            silent = now_s - state.last_seen_s
            if state.exited_s is not None:
                # Its goodbye, sent before it exited, was read before this tick.
                found.append((state.exited_s, rank, f"process {state.pid} exited without saying goodbye"))
            elif state.host == here and state.exit_fd is None and silent > POLL_S and not _alive(state.pid):
                found.append((now_s, rank, f"process {state.pid} exited without saying goodbye"))
            elif silent > self._silent_limit_s():
                found.append((now_s, rank, f"silent for {silent:.1f} s, longer than an interval takes"))
        for _, rank, reason in sorted(found):
            state = self.ranks[rank]
            silent = now_s - state.last_seen_s
            state.lost = True
            record = {
                "type": "rank_lost",
                "rank": rank,
                "last_step": state.last_step,
                "reason": reason,
                "silent_s": round(silent, 2),
            }
            self.write(record)
            self.say(event_line(record))
            if self.metrics is not None:
                self.metrics.rank_down(rank)

    def _judge(self, index: int, summaries: list[StepSummary], now_s: float) -> None:
        self.judged_through = max(self.judged_through, index)
        steps = self.config.interval_steps_of(index)
        expected = {s.rank for s in summaries} - {r for r, st in self.ranks.items() if st.lost}
        base = {"type": "interval", "interval": index, "first_step": steps[0], "last_step": steps[-1]}
        judging_since = time.monotonic()
        try:
            assessment = assess_interval(index, summaries, expected, self.config)
        except TracekitError as error:
            self._skip(base, f"{error}")
            return
        except (
            ValueError,
            AssertionError,
        ) as error:  # an interval too thin to replay (e.g. no step complete)
            self._skip(base, f"cannot judge: {error!r}")
            return
        if not assessment.steps:
            self._skip(base, "no step was summarised by every rank outside a capture")
            return
        self.interval_s = assessment.step_ms / 1000 * self.config.interval_steps
        latest = max(state.last_step for state in self.ranks.values())
        # The steps the ranks ran while this interval was judged, then the usual lead for the request to land.
        judging_s = time.monotonic() - judging_since
        lead = math.ceil(judging_s / max(assessment.step_ms / 1000, 1e-3)) + CAPTURE_LEAD_STEPS
        alerts, capture = self.tracker.update(assessment, latest, now_s, lead_steps=lead)
        self.alerts += len(alerts)
        self.write(interval_record(base, assessment, alerts))
        for alert in alerts:
            self.write(alert)
        if self.metrics is not None:
            self.metrics.update(assessment, alerts)
        lost = [rank for rank, state in self.ranks.items() if state.lost]
        self.say(interval_view(assessment, alerts, lost))
        if capture is not None:
            self._ask_capture(capture)

    def _skip(self, base: dict[str, Any], reason: str) -> None:
        record = {**base, "steps_judged": 0, "skipped": reason}
        self.write(record)
        self.say(event_line(record))

    def _ask_capture(self, request: CaptureRequest) -> None:
        for rank in self.active():
            self._send(self.ranks[rank].address, request.message())
        record = {"type": "capture", **request.message(), "rank": request.rank, "kind": request.kind}
        record.pop("t")
        self.write(record)
        self.say(event_line(record))
        self._pending_manifests.append(request)

    def _merge_captures(self, force: bool = False) -> None:
        """Write run.json of each capture every active rank has finished (sidecars are written by then)."""
        for request in list(self._pending_manifests):
            stop = request.first_step + request.steps
            if force or all(self.ranks[r].last_step >= stop for r in self.active()):
                self._pending_manifests.remove(request)
                directory = self.out_dir / request.directory
                if directory.is_dir():
                    try:
                        write_manifest(directory, run_id=self.run_id)
                    except OSError as error:
                        self.say(f"cannot write {directory / 'run.json'}: {error}")

    def finish(self) -> None:
        """The job is over: report the ranks that exited without a goodbye, judge what is left, write ``end``."""
        now_s = time.monotonic()
        for fd, rank in self.exit_fds().items():
            if select.select([fd], [], [], 0)[0]:
                self.exited(rank, now_s)
        self._find_lost(now_s)
        for index in sorted(self.open_intervals):
            summaries = self.open_intervals.pop(index)
            last = self.config.interval_steps_of(index)[-1]
            if all(s.step < last for s in summaries):
                continue  # the job ended inside this interval: too short to judge fairly
            self._judge(index, summaries, now_s)
        self._merge_captures(force=True)
        record = {
            "type": "end",
            "ranks": [
                {
                    "rank": rank,
                    "steps": state.steps,
                    "received": state.received,
                    "dropped": state.dropped,
                    "done": state.done,
                    "lost": state.lost,
                }
                for rank, state in sorted(self.ranks.items())
            ],
            "alerts": self.alerts,
            "captures": [request.directory for request in self.tracker.captures],
            "refused_datagrams": self.refused,
            "late_summaries": self.late,
            "dropped_in_socket": self.socket_drops,
        }
        self.write(record)
        self._log.close()


def interval_record(
    base: dict[str, Any], assessment: IntervalAssessment, alerts: Sequence[dict[str, Any]]
) -> dict:
    """The ``interval`` record of live.jsonl."""
    return {
        **base,
        "steps_judged": len(assessment.steps),
        "step_ms": round(assessment.step_ms, 3),
        "ranks": [{k: _round(v) for k, v in row.items()} for row in assessment.ranks.to_dicts()],
        "stragglers": [
            {k: a[k] for k in ("rank", "stage", "kind", "slower_pct", "saving_ms", "persistent")}
            for a in alerts
        ],
        "warnings": list(assessment.warnings),
    }


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _watch_exit(pid: int) -> int | None:
    """A pidfd of process ``pid`` (readable once it exits); None where there is none (an old kernel, another host)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(aggregator: Aggregator, parent_pid: int) -> None:
    """Receive and judge until SIGTERM (or until the parent is gone), then finish."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    # Ctrl-C reaches the whole process group: keep judging until record says the job is over.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while not stopping and os.getppid() == parent_pid:
        watched = aggregator.exit_fds()
        ready, _, _ = select.select([aggregator.sock, *watched], [], [], POLL_S)
        now_s = time.monotonic()
        gone = [fd for fd in ready if fd in watched]
        ready = [item for item in ready if item not in gone]
        while ready:
            try:
                data, address, drops = _receive(aggregator.sock)
            except BlockingIOError:
                break
            except OSError:
                continue  # e.g. an ICMP error from a rank that has gone
            aggregator.socket_drops = drops if drops is not None else aggregator.socket_drops
            aggregator.receive(data, address, now_s)
        for fd in gone:
            aggregator.exited(watched[fd], now_s)
        aggregator.tick(now_s)
    # Summaries that arrived in the last moments are still in the socket.
    while True:
        try:
            data, address, drops = _receive(aggregator.sock)
        except OSError:
            break
        aggregator.socket_drops = drops if drops is not None else aggregator.socket_drops
        aggregator.receive(data, address, time.monotonic())
    aggregator.socket_drops = max(aggregator.socket_drops, _dropped_so_far(aggregator.sock) or 0)
    aggregator.finish()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tracekit.live.aggregator", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--fd", type=int, help="an already bound UDP socket (tracekit record passes one)")
    parser.add_argument("--listen", help="HOST:PORT to bind when no --fd is given")
    parser.add_argument("--out", type=Path, required=True, help="directory of live.jsonl and the captures")
    parser.add_argument("--run-id", default=None)
    parser.add_argument("--interval", type=int, default=LiveConfig.interval_steps)
    parser.add_argument("--persist", type=int, default=LiveConfig.persist_intervals)
    parser.add_argument("--capture-steps", type=int, default=LiveConfig.capture_steps)
    parser.add_argument("--capture-period", type=float, default=LiveConfig.capture_period_s)
    parser.add_argument("--threshold", type=float, default=StragglerConfig.threshold)
    parser.add_argument("--prometheus-port", type=int, default=None)
    parser.add_argument("--view", choices=("on", "off"), default="on")
    parser.add_argument("--parent-pid", type=int, default=None)
    return parser.parse_args(argv)


def _socket(args: argparse.Namespace) -> socket.socket:
    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        host, port = live_wire.parse_address(args.listen or "127.0.0.1:0")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((host, port))
    sock.setblocking(False)
    with contextlib.suppress(OSError):  # Linux: each datagram says how many the socket dropped so far
        sock.setsockopt(socket.SOL_SOCKET, _SO_RXQ_OVFL, 1)
    return sock


_SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)
"""Linux's socket option that counts the datagrams a full receive buffer dropped (40 on Linux)."""
_DROPS = struct.Struct("=I")


def _dropped_so_far(sock: socket.socket) -> int | None:
    """The socket's dropped-datagram count from /proc/net/udp (Linux), with those after the last read."""
    try:
        inode = str(os.fstat(sock.fileno()).st_ino)
        for table in ("/proc/net/udp", "/proc/net/udp6"):
            with open(table, encoding="ascii") as rows:
                for row in rows:
                    fields = row.split()
                    if len(fields) > 12 and fields[9] == inode:
                        return int(fields[-1])
    except (OSError, ValueError):
        return None
    return None


def _receive(sock: socket.socket) -> tuple[bytes, Any, int | None]:
    """One datagram, its sender, and the socket's count of dropped datagrams (None where not told)."""
    data, ancillary, _flags, address = sock.recvmsg(65536, socket.CMSG_SPACE(_DROPS.size))
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_RXQ_OVFL and len(value) >= _DROPS.size:
            return data, address, _DROPS.unpack_from(value)[0]
    return data, address, None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tracekit.live.aggregator``."""
    args = parse_args(argv)
    config = LiveConfig(
        interval_steps=args.interval,
        persist_intervals=args.persist,
        capture_steps=args.capture_steps,
        capture_period_s=args.capture_period,
        stragglers=StragglerConfig(threshold=args.threshold),
    )
    with contextlib.suppress(OSError):
        os.nice(5)  # judging must not take the CPU from the ranks it judges
    sock = _socket(args)
    metrics = None
    if args.prometheus_port is not None:
        from tracekit.live.metrics import LiveMetrics

        metrics = LiveMetrics(args.prometheus_port)
    console = Console(stderr=False) if args.view == "on" else None
    aggregator = Aggregator(sock, args.out, config, console, run_id=args.run_id, metrics=metrics)
    aggregator.write(
        {
            "type": "start",
            "pid": os.getpid(),
            "address": "%s:%s" % sock.getsockname()[:2],
            "interval_steps": config.interval_steps,
            "persist_intervals": config.persist_intervals,
            "capture_steps": config.capture_steps,
            "capture_period_s": config.capture_period_s,
            "threshold": config.stragglers.threshold,
            "prometheus_port": args.prometheus_port,
        }
    )
    serve(aggregator, args.parent_pid if args.parent_pid is not None else os.getppid())
    if metrics is not None:
        metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
