"""Live mode on one rank: time every pipeline action cheaply and send one summary per step.

``tracekit record --live`` sets ``TRACEKIT_LIVE_ADDRESS``; the process-wide recorder of
``collectors.capture`` then holds a ``LiveTimer`` for the whole job. The patched schedule methods
time each action through it: ``perf_counter_ns`` on CPU; on GPU a pair of CUDA events per action,
read back once the step's last event has completed (a step or more later: nothing synchronizes).
No torch.profiler. At the end of each step one compact summary (``collectors.live_wire``) goes to
the aggregator over a non-blocking UDP socket.

A rank never waits for the aggregator: a summary that cannot be sent at once is dropped and
counted; the address is resolved on a daemon thread (a name server that does not answer must not
hold the first step); the first problem is reported once per rank (``tracekit:`` on stderr), the
drop count at exit. Memory is bounded: one step of actions, plus at most ``MAX_PENDING_GPU_STEPS``
steps awaiting their CUDA events.

Not for profiler captures (``collectors.capture``) nor for scoring (``tracekit.live``). Imports
torch and the standard library only; never raises into the job.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from collectors import live_wire
from collectors.files import report

MAX_PENDING_GPU_STEPS = 4
"""GPU steps whose events may still be running; an older one is dropped (and counted), never waited for."""

UNANSWERED_WARNING_S = 10.0
"""Warn once when no aggregator has acknowledged anything this long after the first summary."""

Action = tuple[int, str, int, Any, Any, int]
"""(stage, kind, micro-batch, start, end, overlapped): start/end are ns offsets, or CUDA events."""


class _ActionSpan:
    """Times one action: ``with timer.action(stage, kind, microbatch): ...``."""

    __slots__ = ("_kind", "_microbatch", "_stage", "_start", "_timer")

    def __init__(self, timer: LiveTimer, stage: int, kind: str, microbatch: int) -> None:
        self._timer, self._stage, self._kind, self._microbatch = timer, stage, kind, microbatch

    def __enter__(self) -> None:
        self._start = self._timer._mark()

    def __exit__(self, *_exc: object) -> None:
        timer = self._timer
        if timer._in_step:  # an action outside every step has no summary to go to
            timer._actions.append(
                (self._stage, self._kind, self._microbatch, self._start, timer._mark(), timer._pair_depth > 0)
            )


class _PairSpan:
    """An overlapped F&B pair: actions inside are its halves; without any, two halves span the pair."""

    __slots__ = ("_backward", "_count", "_forward", "_start", "_timer")

    def __init__(self, timer: LiveTimer, forward: tuple[int, int], backward: tuple[int, str, int]) -> None:
        self._timer, self._forward, self._backward = timer, forward, backward

    def __enter__(self) -> None:
        self._timer._pair_depth += 1
        self._count = len(self._timer._actions)
        self._start = self._timer._mark()

    def __exit__(self, *_exc: object) -> None:
        timer = self._timer
        timer._pair_depth -= 1
        end = timer._mark()
        if timer._in_step and len(timer._actions) == self._count:
            # The halves ran inside one call (DualPipe's overlap hook): both rows span the pair,
            # as tracekit.analysis.realized reads such a pair from a trace.
            stage, microbatch = self._forward
            timer._actions.append((stage, "F", microbatch, self._start, end, 1))
            timer._actions.append((*self._backward, self._start, end, 1))


class _CommSpan:
    __slots__ = ("_start", "_timer")

    def __init__(self, timer: LiveTimer) -> None:
        self._timer = timer

    def __enter__(self) -> None:
        self._start = time.perf_counter_ns()

    def __exit__(self, *_exc: object) -> None:
        self._timer._comm_ns += time.perf_counter_ns() - self._start


class LiveTimer:
    """Per-process live state: the current step's actions, the socket, the counters."""

    def __init__(self, address: str, rank_of: Callable[[], tuple[int, int]]) -> None:
        self.address = address
        self._rank_of = rank_of
        self._rank: int | None = None
        self._world = 1
        self._host = socket.gethostname()
        self._socket: socket.socket | None = None
        self._resolving = False
        self._cuda: bool | None = None
        self._actions: list[Action] = []
        self._in_step = False
        self._pair_depth = 0
        self._comm_ns = 0
        self._step_start_ns = 0
        self._step_event: Any = None
        self._pending: deque[tuple[dict[str, Any], Any, Any, list[Action]]] = deque()
        self._events: list[Any] = []
        self.sent = 0
        self.dropped = 0
        self.steps = 0
        self._acked = False
        self._first_send_s: float | None = None
        self._warned = False
        self.profiling = False
        """Set by the recorder while torch.profiler runs: such steps are marked, their timing is not typical."""
        self._stage_work: list[list[int]] | None = None
        self._pipeline_group: list[int] | None = None
        self._schedule_class: str | None = None

    # -- timing -------------------------------------------------------------------------------
    def _mark(self) -> Any:
        if not self._cuda:
            return time.perf_counter_ns() - self._step_start_ns
        event = self._events.pop() if self._events else torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def action(self, stage: int, kind: str, microbatch: int) -> _ActionSpan:
        """A context manager timing one compute action."""
        return _ActionSpan(self, stage, kind, microbatch)

    def pair(self, forward: tuple[int, int], backward: tuple[int, str, int]) -> _PairSpan:
        """A context manager around an overlapped F&B pair."""
        return _PairSpan(self, forward, backward)

    def comm(self) -> _CommSpan:
        """A context manager timing a wait on pipeline communication."""
        return _CommSpan(self)

    def begin_step(self, step: int, describe: Callable[[], Any] | None = None) -> None:
        """Called as a training step starts; ``describe`` gives the schedule (its stages' work), read once."""
        if self._stage_work is None and describe is not None:
            self._stage_work, self._pipeline_group, self._schedule_class = _described(describe)
        if self._cuda is None:
            self._cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self._actions = []
        self._in_step = True
        self._pair_depth = 0
        self._comm_ns = 0
        self._step_start_ns = time.perf_counter_ns()
        if self._cuda:
            self._step_event = self._mark()

    def end_step(self, step: int) -> list[dict[str, Any]]:
        """Called as a training step ends: send its summary; returns the aggregator's requests."""
        try:
            return self._end_step(step)
        except Exception as error:  # noqa: BLE001 - live mode must never stop training
            self.dropped += 1
            self._warn(f"live summary of step {step} failed ({error!r}); dropped")
            return []

    def _end_step(self, step: int) -> list[dict[str, Any]]:
        self._in_step = False
        self.steps += 1
        if self._rank is None:
            self._rank, self._world = self._rank_of()
        summary = {
            "t": "step",
            "v": live_wire.VERSION,
            "r": self._rank,
            "w": self._world,
            "h": self._host,
            "p": os.getpid(),
            "s": step,
            "t0": self._step_start_ns,
            "d": time.perf_counter_ns() - self._step_start_ns,
            "c": self._comm_ns,
            "clk": "cuda" if self._cuda else "cpu",
            "cap": int(self.profiling),
            "sw": self._stage_work or [],
        }
        if self._pipeline_group is not None:
            summary["pg"] = self._pipeline_group
        if self._schedule_class is not None:
            summary["sc"] = self._schedule_class
        if not self._cuda:
            summary["a"] = [[s, k, m, a, b, int(o)] for s, k, m, a, b, o in self._actions]
            self._send(summary)
        else:
            self._pending.append((summary, self._step_event, self._mark(), self._actions))
            self._send_completed_gpu_steps()
        self._actions = []
        return self._receive()

    def _send_completed_gpu_steps(self) -> None:
        """Send every pending GPU step whose last event has completed; drop the oldest beyond the bound."""
        while self._pending and self._pending[0][2].query():
            summary, start, end, actions = self._pending.popleft()
            ns = [
                [s, k, m, int(start.elapsed_time(a) * 1e6), int(start.elapsed_time(b) * 1e6), int(o)]
                for s, k, m, a, b, o in actions
            ]
            summary["a"] = ns
            summary["d"] = int(start.elapsed_time(end) * 1e6)
            self._send(summary)
            self._events.extend([start, end, *(e for action in actions for e in action[3:5])])
        while len(self._pending) > MAX_PENDING_GPU_STEPS:
            self._pending.popleft()
            self.dropped += 1

    # -- transport ----------------------------------------------------------------------------
    def _send(self, message: dict[str, Any]) -> None:
        message["x"] = self.dropped
        sock = self._connected()
        data = live_wire.encode(message)
        if sock is None or len(data) > live_wire.MAX_DATAGRAM:
            self.dropped += 1
            if sock is not None:
                self._warn(
                    f"a step summary of {len(data)} bytes exceeds one datagram; such summaries are dropped"
                )
            return
        try:
            sock.send(data)
        except BlockingIOError:
            self.dropped += 1  # backpressure: the aggregator is behind; never wait for it
            return
        except OSError as error:
            self.dropped += 1
            self._warn(
                f"the live aggregator at {self.address} does not answer ({error.strerror or error}); "
                "step summaries are dropped, training goes on"
            )
            return
        self.sent += 1
        if self._first_send_s is None:
            self._first_send_s = time.monotonic()
        elif not self._acked and time.monotonic() - self._first_send_s > UNANSWERED_WARNING_S:
            self._warn(
                f"no live aggregator has answered at {self.address} in {UNANSWERED_WARNING_S:.0f} s; "
                "is the address right? Training goes on"
            )

    def _connected(self) -> socket.socket | None:
        """The connected socket, or None while (or because) the address cannot be resolved."""
        if self._socket is None and not self._resolving:
            self._resolving = True
            if _numeric_host(self.address):
                self._connect()  # no name to look up: nothing can block
            else:
                threading.Thread(target=self._connect, name="tracekit-live-resolve", daemon=True).start()
        return self._socket

    def _connect(self) -> None:
        try:
            host, port = live_wire.parse_address(self.address)
            family, kind, proto, _, where = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            sock.connect(where)
        except (OSError, ValueError) as error:
            self._warn(
                f"cannot reach the live aggregator at {self.address} ({error}); "
                "step summaries are dropped, training goes on"
            )
            return
        self._socket = sock

    def _receive(self) -> list[dict[str, Any]]:
        requests: list[dict[str, Any]] = []
        sock = self._socket
        while sock is not None:
            try:
                data = sock.recv(4096)
            except ConnectionRefusedError:
                # An earlier summary reached no listener (the ICMP error surfaces on this socket).
                self.sent, self.dropped = self.sent - 1, self.dropped + 1
                self._warn(
                    f"nothing listens for live summaries at {self.address}; "
                    "step summaries are dropped, training goes on"
                )
                continue
            except OSError:  # BlockingIOError: nothing waiting
                break
            message = live_wire.decode(data)
            if message is None:
                continue
            self._acked = True
            if message["t"] == "capture":
                requests.append(message)
        return requests

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            report(f"rank {self._rank if self._rank is not None else '?'}: {message}")

    def close(self) -> None:
        """At exit: say goodbye (so the aggregator does not report this rank lost) and report drops."""
        sock = self._socket
        if sock is not None:
            try:
                sock.send(
                    live_wire.encode(
                        {"t": "bye", "v": 1, "r": self._rank, "s": self.steps, "x": self.dropped}
                    )
                )
            except OSError:
                pass
            sock.close()
        if self.dropped:
            report(
                f"rank {self._rank}: live: {self.dropped} of {self.steps} step summaries dropped "
                f"({self.sent} sent to {self.address})"
            )


def _described(describe: Callable[[], Any]) -> tuple[list[list[int]], list[int] | None, str | None]:
    """[stage, params, embedding_params, layers] of this rank's stages (collectors.work), counted once,
    the global ranks of its pipeline's process group (collectors.groups; None when unknown) and the
    schedule's class (None when unknown)."""
    try:
        info = describe()
        work = [[w.stage, w.params, w.embedding_params, w.layers] for w in getattr(info, "stage_work", ())]
        group = getattr(info, "pipeline_group", None)
        class_name = getattr(info, "class_name", None)
        return (
            work,
            None if group is None else [int(rank) for rank in group],
            class_name if isinstance(class_name, str) else None,
        )
    except Exception:  # noqa: BLE001 - an unknown schedule version must not stop training
        return [], None, None


def _numeric_host(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return True
        except OSError:
            continue
    return False


def from_env(
    environ: dict[str, str] | os._Environ[str], rank_of: Callable[[], tuple[int, int]]
) -> LiveTimer | None:
    """The live timer ``tracekit record --live`` asks for through TRACEKIT_LIVE_ADDRESS, else None."""
    address = environ.get(live_wire.ADDRESS_ENV, "").strip()
    return LiveTimer(address, rank_of) if address else None
