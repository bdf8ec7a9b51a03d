"""Where per-rank tasks run: worker processes on this machine, or the workers of a Dask cluster.

An engine opens a ``concurrent.futures.Executor`` for a batch of tasks (or none: run them here) and
says whether this process may read the caches itself. ``LocalEngine`` uses one process per core
(spawned, not forked: forking a process whose polars thread pool runs can deadlock the child; each
started without the caller's ``__main__``, so a script needs no main guard), each with a polars
pool of its share of the cores (one thread where there is a process per core): a rank's reductions
are many small queries on tens of thousands of rows, where a pool's hand-offs cost more CPU than
they save, so ranks in parallel processes beat threads inside one. A worker's start-up (the
interpreter and its imports) costs about 0.3 CPU s, so a batch with less than ``WORKER_MIN_BYTES``
of traces to read, or one task, runs in this process; and where this process's own polars pool is
one thread (the command line's on two cores, ``tracekit.cli.main``), it reads ranks beside its
workers as one of them (``HelpedPool``), so one worker fewer starts. ``DaskEngine`` connects to a
Dask ``distributed`` scheduler and uses ``Client.get_executor()``, the same interface, so the tasks
are the same functions either way; its workers must read the traces at the same path (shared
storage), and this process then reads no trace or cache file itself.

Not for: what the tasks compute (``tracekit.perrank.tasks``).
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    BrokenExecutor,
    Executor,
    Future,
    ThreadPoolExecutor,
    as_completed,
    wait,
)
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

Job = TypeVar("Job")
Result = TypeVar("Result")

DASK_CONNECT_TIMEOUT_S = 5.0
"""How long to wait for a Dask scheduler before saying it cannot be reached."""
WORKER_MIN_BYTES = 128 * 1024 * 1024
"""Least trace bytes (as stored: a gzip file counts its compressed size) a batch must read before
``LocalEngine`` starts workers for it. Reading costs about 10 CPU ms per MB of JSON; below this the
workers' start-up is not repaid in wall time (on 2 cores, 8 ranks of 56 MB: 2.7 s with two workers
against 4.0 s in this process, at the same CPU)."""


class Engine(Protocol):
    """Runs batches of per-rank tasks."""

    @property
    def reads_here(self) -> bool:
        """True when this process may read cached results itself instead of asking a worker."""
        ...

    def executor(self, tasks: int, work_bytes: int | None = None) -> AbstractContextManager[Executor | None]:
        """An executor for ``tasks`` tasks reading ``work_bytes`` of traces (None: not known),
        closed on exit; None runs them in this process."""
        ...


@dataclass(frozen=True)
class LocalEngine:
    """Worker processes on this machine, one per core unless ``workers`` says otherwise."""

    workers: int | None = None
    """Most processes reading ranks, this one included where it helps (``HelpedPool``); None:
    ``default_workers(work_bytes)``. 1 runs every task in this process."""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise TracekitError(f"workers must be at least 1, got {self.workers}")

    @property
    def reads_here(self) -> bool:
        """This machine holds the caches: a cached result is read here, no worker started."""
        return True

    @contextmanager
    def executor(self, tasks: int, work_bytes: int | None = None) -> Iterator[Executor | None]:
        """A spawned process pool sized to the tasks (``HelpedPool`` where this process helps), or
        None when one process is enough."""
        workers = max(1, min(self.workers or default_workers(work_bytes), tasks))
        if workers == 1:
            yield None
            return
        from concurrent.futures import ProcessPoolExecutor  # here: most runs start no worker

        from tracekit.perrank.spawn import MainlessSpawnContext
        from tracekit.trace.worker_pool import start_worker

        helps = _one_thread_here()
        with ProcessPoolExecutor(
            max_workers=workers - 1 if helps else workers,
            mp_context=MainlessSpawnContext(),
            initializer=start_worker,
            initargs=(workers,),
        ) as pool:
            try:
                yield HelpedPool(pool, workers - 1) if helps else pool
            except BaseException:  # Ctrl-C, or a task's error: the batch is abandoned
                _stop(pool)
                raise


class HelpedPool(Executor):
    """A process pool whose caller runs tasks too: ``run_tasks`` hands the pool's workers jobs from
    the front of a batch and runs jobs from its back here, so this process, idle otherwise while
    its workers read, is one of them."""

    def __init__(self, pool: Executor, workers: int) -> None:
        self.pool, self.workers = pool, workers

    def submit(self, fn: Callable[..., Result], /, *args: object, **kwargs: object) -> Future[Result]:
        return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def _one_thread_here() -> bool:
    """True when this process's polars pool is one thread: it may read ranks beside its workers
    without running more threads than cores. Polars not imported yet: False (its pool is not known)."""
    polars = sys.modules.get("polars")
    return polars is not None and polars.thread_pool_size() == 1


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what ``pool`` has not started and end its workers now: leaving the pool otherwise waits
    for every task already queued (a Ctrl-C sent to this process alone, or one that reached a worker
    still starting, where it waits until the worker's initializer)."""
    # The executor's own processes: no public handle on them, and shutdown drops its own.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def default_workers(work_bytes: int | None = None) -> int:
    """Processes a ``LocalEngine`` reads a batch of ``work_bytes`` of traces with by default: one per
    core, this one alone under ``WORKER_MIN_BYTES`` (None: enough) or on one core."""
    if work_bytes is not None and work_bytes < WORKER_MIN_BYTES:
        return 1
    return os.cpu_count() or 1


@dataclass(frozen=True)
class DaskEngine:
    """The workers of a running Dask ``distributed`` cluster, reached through its scheduler."""

    address: str
    """The scheduler, e.g. ``tcp://head-node:8786``."""
    connect_timeout_s: float = DASK_CONNECT_TIMEOUT_S
    """How long to wait for the scheduler."""

    def __post_init__(self) -> None:
        _parts(self.address)
        if self.connect_timeout_s <= 0:
            raise TracekitError(f"connect timeout must be positive, got {self.connect_timeout_s}")

    @property
    def reads_here(self) -> bool:
        """The workers hold the caches: every read is a task."""
        return False

    @contextmanager
    def executor(self, tasks: int, work_bytes: int | None = None) -> Iterator[Executor | None]:
        """``Client.get_executor()`` of a client connected to the scheduler (whatever the batch);
        TracekitError when it cannot be reached."""
        try:
            from distributed import Client
        except ImportError:
            raise TracekitError(
                "running on a Dask cluster needs dask distributed: pip install 'tracekit[distributed]'"
            ) from None
        _probe(self.address, self.connect_timeout_s)
        try:
            client = Client(self.address, timeout=self.connect_timeout_s, set_as_default=False)
        except Exception as error:  # noqa: BLE001 - the scheduler answered the probe, then failed the client's start
            raise TracekitError(f"cannot use the Dask scheduler ({_reason(error)})", self.address) from None
        try:
            yield client.get_executor(pure=False)  # each task runs once; its arguments need no hashing
        finally:
            client.close()


def _reason(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return text or type(error).__name__


def _parts(address: str) -> tuple[str, str, int]:
    """(protocol, host, port) of a scheduler address; TracekitError when it is not one."""
    scheme, _, location = address.partition("://")
    host, _, port = location.rpartition(":")
    if not scheme or not host or not port.isdigit():
        raise TracekitError(
            "not a scheduler address: expected PROTOCOL://HOST:PORT, e.g. tcp://head-node:8786", address
        )
    return scheme, host, int(port)


def _probe(address: str, timeout_s: float) -> None:
    """TracekitError unless ``address`` is a Dask scheduler that answers within ``timeout_s``.

    A plain socket first, so that a refused port fails at once; then Dask's own handshake. Both
    before any ``Client`` exists: a client whose start failed waits out further timeouts when it
    is collected, and prints from there.
    """
    import asyncio  # here, not at the top: only a Dask run needs them, and asyncio costs every command
    import socket

    from distributed.comm import connect

    scheme, host, port = _parts(address)
    if scheme in ("tcp", "tls"):
        try:
            socket.create_connection((host.strip("[]"), port), timeout=timeout_s).close()
        except OSError as error:
            reason = error.strerror or _reason(error)
            raise TracekitError(
                f"cannot reach the Dask scheduler within {timeout_s:g} s ({reason})", address
            ) from None

    async def handshake() -> None:
        comm = await connect(address, timeout=timeout_s)
        await comm.close()

    try:
        # In a thread of its own: the caller may already run an event loop (a notebook).
        with ThreadPoolExecutor(max_workers=1) as thread:
            thread.submit(asyncio.run, asyncio.wait_for(handshake(), timeout_s * 2)).result()
    except Exception as error:  # noqa: BLE001 - anything but a Dask scheduler's answer: one line, no traceback
        raise TracekitError(f"no Dask scheduler answers there ({_reason(error)})", address) from None


def run_tasks(
    executor: Executor | None,
    task: Callable[[Job], Result],
    jobs: Sequence[Job],
    on_done: Callable[[Job], None] | None = None,
) -> list[Result]:
    """``task(job)`` for every job, on ``executor`` (here when None); results in ``jobs`` order.

    The first task to fail raises its error here (a TracekitError naming its file stays one).
    """
    if executor is None:
        results = []
        for job in jobs:
            results.append(task(job))
            if on_done:
                on_done(job)
        return results
    if isinstance(executor, HelpedPool):
        return _run_beside(executor, task, jobs, on_done)
    futures = {executor.submit(task, job): index for index, job in enumerate(jobs)}
    done: dict[int, Result] = {}
    for future in as_completed(futures):
        job = jobs[futures[future]]
        done[futures[future]] = _result(future, job)
        if on_done:
            on_done(job)
    return [done[index] for index in range(len(jobs))]


def _run_beside(
    pool: HelpedPool,
    task: Callable[[Job], Result],
    jobs: Sequence[Job],
    on_done: Callable[[Job], None] | None,
) -> list[Result]:
    """``run_tasks`` on a ``HelpedPool``: its workers take jobs from the front, each kept one job
    ahead so that none waits for this process to hand it the next; this process runs jobs from the
    back, one at a time, collecting what the workers finished in between."""
    waiting = deque(range(len(jobs)))
    running: dict[Future[Result], int] = {}
    done: dict[int, Result] = {}

    def finished(index: int, result: Result) -> None:
        done[index] = result
        if on_done:
            on_done(jobs[index])

    while waiting or running:
        while waiting and len(running) < 2 * pool.workers:
            index = waiting.popleft()
            running[pool.submit(task, jobs[index])] = index
        if waiting:
            index = waiting.pop()
            finished(index, task(jobs[index]))
        else:
            wait(running, return_when=FIRST_COMPLETED)
        for future in [future for future in running if future.done()]:
            index = running.pop(future)
            finished(index, _result(future, jobs[index]))
    return [done[index] for index in range(len(jobs))]


def _result(future: Future[Result], job: object) -> Result:
    """A worker's result; its death or a missing tracekit there as one TracekitError naming the file."""
    try:
        return future.result()
    except BrokenExecutor:
        raise TracekitError(
            "a worker process died (out of memory, or killed) while the ranks were read", _file_of(job)
        ) from None
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] not in _OWN_PACKAGES:
            raise
        raise TracekitError(
            f"a worker cannot import {error.name}: install tracekit where the workers run "
            "(pip install tracekit, the same version as here)",
            _file_of(job),
        ) from None


_OWN_PACKAGES = frozenset({"tracekit", "collectors"})
"""What a worker imports to run a task: a worker without them has not had tracekit installed."""


def _file_of(job: object) -> Path | None:
    """The file a job reads (``RankJob.trace``, ``FiguresJob.table``), for a message naming it."""
    return getattr(job, "trace", None) or getattr(job, "table", None)
