"""How a worker process that reads traces starts: polars' thread pool its share of the cores, and a
Ctrl-C that ends it without a word.

A rank's parse and reductions are many small queries (a rank's GPU work is tens of thousands of
rows), where a pool's hand-offs cost more CPU than they save; workers read ranks side by side
instead, and a worker per core with a full pool each would run cores x cores threads. Polars reads
``POLARS_MAX_THREADS`` once, when it is imported, so the size is set by the worker's initializer,
before its first task imports polars: this module imports nothing that does.

A Ctrl-C at a terminal reaches every process of the command; the command's own process says
"Aborted!" and stops its pool, so a worker leaves at once, its traceback unprinted.

Not for: how many workers start, or when (``tracekit.perrank.engine``, ``tracekit.trace.run.ingest``).
"""

from __future__ import annotations

import os
import signal


def start_worker(workers: int) -> None:
    """The initializer of each of ``workers`` worker processes: polars' pool of their share of the
    cores (at least one thread), unless POLARS_MAX_THREADS is set; a Ctrl-C ends the worker quietly,
    one that came while it started (blocked till now) included."""
    os.environ.setdefault("POLARS_MAX_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    signal.signal(signal.SIGINT, _leave)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _leave(signum: int, frame: object) -> None:
    os._exit(128 + signum)
