"""The spawn context of ``tracekit.perrank.engine.LocalEngine``'s worker processes.

Spawn, not fork: forking a process whose polars thread pool runs can deadlock the child. Each
worker starts without the caller's ``__main__``, so a script needs no main guard. Imported only
when workers are started: ``multiprocessing`` and its process pool cost tens of milliseconds of
every command's start-up otherwise.

Not for: when workers are started (``tracekit.perrank.engine``).
"""

from __future__ import annotations

import multiprocessing.context
import signal
import sys
import types


class MainlessSpawnProcess(multiprocessing.context.SpawnProcess):
    """A spawned worker that does not run the parent's ``__main__`` again.

    Spawn re-runs the parent's main script in every child before it works. A script that calls
    ``tracekit.analyse`` without an ``if __name__ == "__main__":`` guard would then analyse again in
    each worker and fail there (a process may not start workers while it starts up), and a script
    read from standard input cannot be re-run at all. The tasks are tracekit's own functions, so a
    worker needs nothing from the parent's main: it is started with an empty one.
    """

    @staticmethod
    def _Popen(process_obj):  # multiprocessing calls it by this name
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        # Started with Ctrl-C blocked (the mask is inherited across fork and exec): one during its
        # imports would print their traceback. Its initializer (``tracekit.trace.worker_pool``)
        # unblocks it and ends it quietly; here a Ctrl-C meanwhile waits, and comes after.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return multiprocessing.context.SpawnProcess._Popen(process_obj)
        finally:
            sys.modules["__main__"] = main
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class MainlessSpawnContext(multiprocessing.context.SpawnContext):
    """The spawn context, its workers started without the parent's ``__main__``."""

    Process = MainlessSpawnProcess
