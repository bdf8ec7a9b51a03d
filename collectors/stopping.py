"""How a rank that is capturing reacts to a stop signal: it writes what it captured, then stops.

Terminals, launchers and schedulers stop a job with one of several signals: SIGINT (Ctrl-C),
SIGTERM (``kill``, torchrun and torch.multiprocessing when a rank dies, Slurm at the time limit),
SIGHUP (a closed terminal, an SSH drop, a killed tmux session), SIGQUIT (Ctrl-\\) and SIGUSR1/2
(what Slurm's ``--signal`` sends before the time limit). All but SIGINT kill a process outright by
default, losing its profiler's buffer. While a capture window is open, ``SignalGuard`` takes over
every one of them, only where the job left Python's defaults in place and only on the main thread:
the signal becomes an exception (KeyboardInterrupt for SIGINT, SystemExit(128 + N) for the others)
that unwinds the job as usual, so the step in progress is marked unfinished and the trace written.

One exception is raised per window: later signals (a launcher passing on what the rank also got
from its process group, torch.multiprocessing's parent-death SIGINT) are only noted, so they never
cut short the unwinding or the trace write the first one started. A signal that arrives while the
collector is writing waits until the write is done. The name recorded is the signal that stopped
the job: a SIGINT that arrives because the rank's parent died (``PR_SET_PDEATHSIG``, how
torch.multiprocessing ties its ranks to it) gives way to the signal that killed the parent. The
job's own handlers are never replaced; the defaults come back when the window closes.

Not for the capture state machine (``collectors.capture``). Standard library only.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)
"""Every signal that ends a capture the same way (SIGINT first: it is the one Python raises itself)."""


SAME_SIGNAL_S = 1.0
"""Signals this close to the first one are taken as one stop (as ``collectors.job.REPEAT_WINDOW_S``)."""


def _default(number: int) -> Callable[..., Any] | int:
    return signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL


class SignalGuard:
    """Turns stop signals into one exception while installed, deferring it inside ``writing()`` blocks."""

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._writing = 0
        self._pending: int | None = None
        self._raised = False
        self._parent: int | None = None
        self._names: list[tuple[str, bool, float]] = []
        """Each signal received while installed, whether it was the parent-death SIGINT, and when."""

    @property
    def received(self) -> str | None:
        """Name of the signal that stopped this rank, e.g. ``SIGTERM``; None when none came."""
        named = [(name, at) for name, parent_died, at in self._names if not parent_died]
        if not named:
            return self._names[0][0] if self._names else None
        # Signals pending together run their handlers in signal-number order, SIGINT first: a SIGINT
        # that a dying launcher forwarded beside the real signal must not take its name.
        first_at = named[0][1]
        together = [name for name, at in named if at - first_at <= SAME_SIGNAL_S]
        return next((name for name in together if name != "SIGINT"), together[0])

    def install(self) -> None:
        """Take over the stop signals whose handlers are still Python's defaults (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._parent = os.getppid()
        self._raised = False
        for number in STOP_SIGNALS:
            if signal.getsignal(number) is _default(number):
                self._previous[number] = signal.signal(number, self._on_signal)

    def uninstall(self) -> None:
        """Give the signals back to their earlier handlers, where they are still ours."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number, handler in self._previous.items():
            if signal.getsignal(number) == self._on_signal:
                signal.signal(number, handler)
        self._previous = {}

    def begin_writing(self) -> None:
        """Defer signals until ``end_writing``: a trace being written is never cut short by one."""
        self._writing += 1

    def end_writing(self) -> None:
        """End a deferral; raises the deferred signal's exception, if one came meanwhile."""
        self._writing = max(self._writing - 1, 0)
        if self._writing == 0 and self._pending is not None:
            number, self._pending = self._pending, None
            self._raise(number)

    def exiting(self) -> None:
        """The process is ending (atexit): from now on signals are only noted, never raised."""
        self._writing += 1

    def _on_signal(self, number: int, _frame: FrameType | None) -> None:
        parent_died = number == signal.SIGINT and self._parent is not None and os.getppid() != self._parent
        self._names.append((signal.Signals(number).name, parent_died, time.monotonic()))
        if self._raised or self._pending is not None:
            return  # the first signal is already ending the window: this one is only noted
        if self._writing:
            self._pending = number
            return
        self._raise(number)

    def _raise(self, number: int) -> None:
        self._raised = True
        if number == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + number)


class DeferredSpan:
    """A profiler span entered and left with stop signals deferred (``SignalGuard.writing``).

    A signal raised inside torch's ``record_function`` bookkeeping leaves a half-entered span that
    breaks the trace's export (and can crash the process as it ends); here a signal that comes
    meanwhile is raised only once the span is whole: after entering (the span is then left again)
    or after leaving.
    """

    __slots__ = ("_guard", "_span")

    def __init__(self, span: Any, guard: SignalGuard) -> None:
        self._span, self._guard = span, guard

    def __enter__(self) -> DeferredSpan:
        self._guard.begin_writing()
        self._span.__enter__()
        try:
            self._guard.end_writing()  # a signal that came meanwhile is raised here, the span whole
        except BaseException:
            self._leave()
            raise
        return self

    def __exit__(self, *_: object) -> bool:
        self._leave()
        return False

    def _leave(self) -> None:
        self._guard.begin_writing()
        try:
            self._span.__exit__(None, None, None)
        finally:
            self._guard.end_writing()
