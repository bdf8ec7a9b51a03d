"""Run a job's command the way a shell runs it: signals reach the whole job, and nothing outlives it.

``run_job`` starts the command in its own process group and (on Linux) makes this process the
subreaper of everything the command starts, so a rank whose launcher dies is re-parented here
rather than to PID 1. Every stop signal sent to this process (``collectors.stopping.STOP_SIGNALS``:
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2) is passed to the job's process group (a terminal's
Ctrl-C reaches only this process, since the job has a group of its own); the job then has
``grace_s`` seconds to wind down (the collector writes what each rank captured), after which every
process still alive is killed. The first signal is answered on stderr. Signals that follow within
``REPEAT_WINDOW_S`` count as the same one (``timeout --foreground`` and other wrappers pass on the
Ctrl-C they also received), and so does any repeated signal other than SIGINT (a scheduler
repeating SIGTERM): only a second, deliberate Ctrl-C, after the first was answered, kills at once.
When the command exits by itself but leaves processes behind, they get ``grace_s`` seconds, then
SIGTERM, then ``grace_s`` more, then SIGKILL.

The job runs in a background process group: it cannot read from the terminal. Not for the
capture itself (``collectors.launch``). Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from collectors.files import report
from collectors.manifest import Interruption
from collectors.stopping import STOP_SIGNALS

FORWARDED = STOP_SIGNALS
"""Signals passed on to the job."""
REPEAT_WINDOW_S = 1.0
"""A signal this soon after the first counts as the same one: no person presses Ctrl-C twice
within a second on purpose, but a wrapper passing the terminal's Ctrl-C on does it within microseconds."""

_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.05


@dataclass(frozen=True)
class JobOutcome:
    """How the job ended."""

    exit_code: int
    """The command's exit status (128 + N for a signal N), or the interruption's when interrupted."""
    interruption: Interruption | None
    left_behind: int
    """Processes still running after the command exited by itself, stopped here."""


def _become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc; empty elsewhere)."""
    found: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            found += map(int, children.read_text().split())
    return found


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (Linux /proc; True elsewhere)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True
    return state != "Z"


def _descendants(roots: list[int]) -> list[int]:
    """``roots`` and every process below them."""
    found, pending = [], list(roots)
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += _children(pid)
    return found


class _Job:
    """The running job: its process group, what signals came, and who is left to reap."""

    def __init__(self, command: Sequence[str], env: dict[str, str] | None, grace_s: float) -> None:
        self.grace_s = grace_s
        self.subreaper = _become_subreaper()
        # Children this process had before the job (e.g. a live aggregator) are none of the job's.
        self.others = set(_children(os.getpid()))
        # process_group=0: the job leads a group of its own, so signals can be sent to all of it.
        self.process = subprocess.Popen(list(command), env=env, process_group=0)
        self.signals: list[tuple[signal.Signals, int]] = []
        self.killed = False
        self.killed_at_once = False

    def on_signal(self, number: int, _frame: FrameType | None) -> None:
        received = signal.Signals(number)
        now_ns = time.time_ns()
        self.signals.append((received, now_ns))
        if len(self.signals) == 1:
            self.send(received)
            again = "; Ctrl-C again stops it at once" if self.grace_s > REPEAT_WINDOW_S else ""
            report(
                f"received {received.name}: the job's ranks are writing what they captured; "
                f"waiting up to {self.grace_s:g} s for them{again}"
            )
            return
        first_ns = self.signals[0][1]
        deliberate = received == signal.SIGINT and now_ns - first_ns > REPEAT_WINDOW_S * 1e9
        if deliberate and not self.killed:
            report("received SIGINT again: stopping the job at once")
            self.send(signal.SIGKILL)
            self.killed = self.killed_at_once = True

    def adopted(self) -> list[int]:
        """Processes of the job whose parent died: as subreaper, they are now this process's children."""
        return [pid for pid in _children(os.getpid()) if pid not in self.others and pid != self.process.pid]

    def processes(self) -> list[int]:
        """Every live process of the job: the command, what it started, and what was adopted."""
        roots = self.adopted() + ([self.process.pid] if self.process.returncode is None else [])
        return _descendants(roots)

    def send(self, number: signal.Signals) -> None:
        """Send ``number`` to the job's process group and, to stop it, to each of its processes."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, number)
        # SIGINT goes to the group only: a launcher's own Ctrl-C handling must not run twice.
        if number != signal.SIGINT and self.subreaper:
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, number)

    def reap(self) -> bool:
        """Collect exited processes of the job; True while any of them is alive."""
        alive = self.process.poll() is None
        if not self.subreaper:
            if alive:
                return True
            try:
                os.killpg(self.process.pid, 0)
            except (ProcessLookupError, PermissionError):
                return False
            return True
        for pid in self.adopted():
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            alive = alive or done == 0
        return alive

    def wait(self) -> JobOutcome:
        """Wait for the job and everything it started, within the bounds of the module docstring."""
        left_behind = 0
        leftover_deadlines: list[float] = []
        while self.reap():
            now = time.monotonic()
            if self.signals:
                first_ns = self.signals[0][1]
                if not self.killed and time.time_ns() - first_ns > self.grace_s * 1e9:
                    self.send(signal.SIGKILL)
                    self.killed = True
            elif self.process.returncode is not None:
                if not leftover_deadlines:
                    leftover_deadlines = [now + self.grace_s, now + 2 * self.grace_s]
                elif now > leftover_deadlines[-1]:
                    self.send(signal.SIGKILL)
                    leftover_deadlines = [float("inf")]
                elif len(leftover_deadlines) == 2 and now > leftover_deadlines[0]:
                    # Counted only now: a helper that is itself exiting as the command ends (the
                    # multiprocessing resource tracker) is not left behind.
                    still = [pid for pid in self.processes() if _running(pid)]
                    left_behind = len(still) if self.subreaper else 1
                    self.send(signal.SIGTERM)
                    leftover_deadlines = leftover_deadlines[1:]
            time.sleep(_POLL_S)
        if self.process.returncode is None:
            self.process.wait()
        if self.signals:
            number, received_ns = self.signals[0]
            # What a shell reports for a command stopped by the signal: 130 for SIGINT, 143 for SIGTERM.
            after_grace = self.killed and not self.killed_at_once
            stop = Interruption(number.name, received_ns, after_grace, self.killed_at_once)
            return JobOutcome(128 + number, stop, left_behind)
        code = self.process.returncode
        return JobOutcome(128 - code if code < 0 else code, None, left_behind)


def run_job(command: Sequence[str], env: dict[str, str] | None, grace_s: float) -> JobOutcome:
    """Run ``command`` to its end (see the module docstring); raises OSError if it cannot start."""
    job = _Job(command, env, grace_s)
    previous = {}
    with contextlib.suppress(ValueError):  # not the main thread: signals stay where they were
        for number in FORWARDED:
            # An ignored signal stays ignored (``nohup tracekit record``), as a shell leaves it.
            if signal.getsignal(number) != signal.SIG_IGN:
                previous[number] = signal.signal(number, job.on_signal)
    try:
        return job.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
