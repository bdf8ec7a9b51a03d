"""How a rank that is capturing reacts to SIGINT and SIGTERM: it writes what it captured, then stops.

Python turns SIGINT into KeyboardInterrupt, but SIGTERM (what launchers such as torchrun and
torch.multiprocessing send to the surviving ranks when one dies, and what ``tracekit record``
passes on) kills a process outright, losing its profiler's buffer. While a capture window is open,
``SignalGuard`` takes over both signals, only where the job left Python's defaults in place and
only on the main thread: the signal becomes an exception (KeyboardInterrupt for SIGINT,
SystemExit(143) for SIGTERM) that unwinds the job as usual, so the step in progress is marked
unfinished and the trace written. A signal that arrives while the collector is writing waits until
the write is done, and so does a second signal. The job's own handlers are never replaced; the defaults come back when the
window closes.

Not for the capture state machine (``collectors.capture``). Standard library only.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

_GUARDED = (signal.SIGINT, signal.SIGTERM)


class SignalGuard:
    """Turns SIGINT/SIGTERM into exceptions while installed, deferring them inside ``writing()`` blocks."""

    def __init__(self) -> None:
        self.received: str | None = None
        """Name of the first signal received while installed, e.g. ``SIGTERM``."""
        self._previous: dict[int, Any] = {}
        self._writing = 0
        self._pending: int | None = None

    def install(self) -> None:
        """Take over the signals whose handlers are still Python's defaults (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        defaults: dict[int, Callable[..., Any] | int] = {
            signal.SIGINT: signal.default_int_handler,
            signal.SIGTERM: signal.SIG_DFL,
        }
        for number in _GUARDED:
            if signal.getsignal(number) is defaults[number]:
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
        if self.received is None:
            self.received = signal.Signals(number).name
        if self._writing:
            self._pending = number
            return
        self._raise(number)

    def _raise(self, number: int) -> None:
        # Still installed: a second signal (torch.multiprocessing's ranks get SIGINT when their
        # parent dies) must not cut the trace write the first one started. Once the window closes
        # the defaults are back; ``tracekit record`` kills after its grace time in any case.
        if number == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + number)
