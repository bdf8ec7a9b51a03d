"""Worker processes start from tracekit alone (a caller's script never runs again in them) and fail in one line."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracekit.errors import TracekitError
from tracekit.perrank.engine import WORKER_MIN_BYTES, HelpedPool, LocalEngine, default_workers, run_tasks

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "1f1b"

SCRIPT = """\
import tracekit
print("analysed", tracekit.analyse({run!r}).case.measured_ms().size, "steps")
"""
"""What a user writes first: no ``if __name__ == "__main__":`` guard."""


def _uncached(tmp_path: Path) -> Path:
    run = tmp_path / "1f1b"
    shutil.copytree(SAMPLE, run, ignore=shutil.ignore_patterns(".tracekit-cache"))
    return run


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_script_without_a_main_guard_analyses_once_on_worker_processes(tmp_path: Path, how: str) -> None:
    source = SCRIPT.format(run=str(_uncached(tmp_path)))
    script = tmp_path / "analyse_run.py"
    script.write_text(source)

    command = [sys.executable, str(script)] if how == "file" else [sys.executable, "-"]
    done = subprocess.run(
        command, input=None if how == "file" else source, capture_output=True, text=True, timeout=300, check=False
    )

    assert done.returncode == 0, done.stderr[-2000:]
    # Four ranks, not cached: the parse ran on worker processes, and the script's own line came once.
    assert done.stdout.splitlines() == ["analysed 2 steps"]
    assert (tmp_path / "1f1b" / ".tracekit-cache").is_dir()


def test_a_worker_that_dies_is_one_error_not_a_broken_pool() -> None:
    with LocalEngine(workers=2).executor(2) as pool, pytest.raises(TracekitError, match="a worker process died"):
        run_tasks(pool, os._exit, [3, 3])  # each worker exits at once, as the out-of-memory killer would


def test_a_worker_without_tracekit_is_told_to_install_it() -> None:
    with LocalEngine(workers=2).executor(2) as pool, pytest.raises(TracekitError, match="install tracekit where"):
        run_tasks(pool, importlib.import_module, ["tracekit.not_on_this_worker", "json"])


def _pool_size(_: object) -> tuple[int, int]:
    import polars as pl

    return os.getpid(), pl.thread_pool_size()


def test_workers_share_the_cores_among_their_polars_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker per core: each polars pool gets its share, so workers never oversubscribe the host."""
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    cores = os.cpu_count() or 1
    with LocalEngine(workers=2).executor(2) as pool:
        sizes = dict(run_tasks(pool, _pool_size, [0, 1, 2, 3]))

    assert os.getpid() not in sizes
    assert set(sizes.values()) == {max(1, cores // 2)}


def test_a_small_batch_runs_here_and_a_large_one_on_a_worker_per_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)

    assert default_workers(WORKER_MIN_BYTES - 1) == 1
    assert default_workers(WORKER_MIN_BYTES) == default_workers(None) == 4
    with LocalEngine().executor(tasks=8, work_bytes=1024) as pool:
        assert pool is None


HELPED = """\
import operator, os
import polars as pl
from tracekit.perrank.engine import HelpedPool, LocalEngine, run_tasks
with LocalEngine(workers=2).executor(8) as pool:
    print(pl.thread_pool_size(), type(pool).__name__, pool.workers)
    print(os.getpid(), *run_tasks(pool, operator.call, [os.getpid] * 8))
"""


def test_a_process_with_a_one_thread_pool_reads_beside_one_worker_fewer() -> None:
    """Two processes reading: this one, its polars pool one thread, and one spawned worker."""
    done = subprocess.run(
        [sys.executable, "-c", HELPED],
        env={**os.environ, "POLARS_MAX_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.splitlines()
    assert first == "1 HelpedPool 1"
    here, *ran_in = (int(pid) for pid in second.split())
    assert len(ran_in) == 8 and here in ran_in and len(set(ran_in)) == 2


def test_a_process_with_a_pool_of_threads_leaves_the_ranks_to_its_workers() -> None:
    """This test's process: its polars pool a thread per core (none set), it never reads beside workers."""
    import polars as pl

    with LocalEngine(workers=2).executor(4) as pool:
        helped = isinstance(pool, HelpedPool)

    assert helped == (pl.thread_pool_size() == 1)


INTERRUPTED = """\
import operator, os, time
from tracekit.perrank.engine import WORKER_MIN_BYTES, HelpedPool, LocalEngine, default_workers, run_tasks
try:
    with LocalEngine(workers=2).executor(2) as pool:
        print(*set(run_tasks(pool, operator.call, [os.getpid] * 4)), flush=True)  # workers are up
        run_tasks(pool, time.sleep, [60, 60])
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("to", "when_s", "helped"),
    [("group", 0.0, False), ("group", 2.0, False), ("parent", 2.0, False), ("group", 2.0, True)],
)
def test_ctrl_c_ends_the_workers_at_once_and_silently(to: str, when_s: float, helped: bool) -> None:
    """Ctrl-C at a terminal reaches the whole process group (``group``), ``kill -INT`` the command
    alone (``parent``): while the workers start (0 s) or run minute-long tasks, the command stops at
    once, and no worker prints a traceback or is left running; also where the command reads ranks
    beside its workers (``helped``: its polars pool one thread)."""
    script = ("import polars\n" + INTERRUPTED) if helped else INTERRUPTED
    env = {**os.environ, "POLARS_MAX_THREADS": "1"} if helped else None
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    workers: list[int] = []
    if when_s:
        assert process.stdout is not None
        workers = [int(pid) for pid in process.stdout.readline().split()]
        time.sleep(when_s)
    else:
        time.sleep(0.3)  # the executor is spawning its workers
    if to == "group":
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, signal.SIGINT)
    started = time.monotonic()
    out, err = process.communicate(timeout=30)

    assert time.monotonic() - started < 10
    assert "Traceback" not in err, err[-2000:]
    assert out.strip().endswith("interrupted") or not out.strip(), out
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
