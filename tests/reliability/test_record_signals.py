"""Signals behave as in a shell: Ctrl-C or SIGTERM reach the whole job, ``record`` waits a bounded
time, writes the manifest with the interruption, exits 130/143, and leaves no process behind.
A step cut off by the signal is never counted."""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from record_runs import (
    TRACEKIT,
    alive,
    example_job,
    manifest,
    record_args,
    run,
    start,
    stray_files,
    wait_for_window,
)

from collectors.launch import NOTHING_CAPTURED_EXIT
from tracekit.run_analysis import realized_actions
from tracekit.trace.run import load_run

pytestmark = pytest.mark.slow

RANKS = 4
MICROBATCHES = 4


@dataclass(frozen=True)
class Interrupted:
    """A 4-rank capture stopped by a signal while its window was open."""

    out_dir: Path
    exit_code: int
    stderr: str
    pids: list[int]
    seconds_to_stop: float


def _interrupt(out_dir: Path, number: signal.Signals, whole_group: bool) -> Interrupted:
    # Rank 0 sleeps 50 ms in each of its actions: a step lasts about 0.4 s, nearly all of it inside
    # actions, so the signal lands inside a step (between two, no step would be cut off and the
    # check that none is counted would hold vacuously), as a real job's long steps make likely.
    job = example_job(
        "1f1b", "--slow-rank", "0", "--slow-ms", "50", "--slow-how", "sleep",
        ranks=RANKS, microbatches=MICROBATCHES, steps=100000,
    )  # fmt: skip
    record = start(record_args(out_dir, job, steps="1:", grace_s=30))
    try:
        pids = wait_for_window(out_dir, RANKS)
        time.sleep(1.5)  # a few steps into the window
        sent = time.monotonic()
        if whole_group:
            os.killpg(record.pid, number)  # what a terminal does on Ctrl-C
        else:
            os.kill(record.pid, number)  # what `kill PID` or a scheduler does
        _, stderr = record.communicate(timeout=90)
        return Interrupted(out_dir, record.returncode, stderr, pids, time.monotonic() - sent)
    finally:
        if record.poll() is None:
            os.killpg(record.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def ctrl_c(tmp_path_factory: pytest.TempPathFactory) -> Interrupted:
    return _interrupt(tmp_path_factory.mktemp("ctrl-c"), signal.SIGINT, whole_group=True)


@pytest.fixture(scope="module")
def sigterm(tmp_path_factory: pytest.TempPathFactory) -> Interrupted:
    return _interrupt(tmp_path_factory.mktemp("sigterm"), signal.SIGTERM, whole_group=False)


@pytest.mark.parametrize(("which", "code", "name"), [("ctrl_c", 130, "SIGINT"), ("sigterm", 143, "SIGTERM")])
def test_record_exits_like_a_shell_and_says_so_in_the_manifest(
    request: pytest.FixtureRequest, which: str, code: int, name: str
) -> None:
    stopped: Interrupted = request.getfixturevalue(which)

    written = manifest(stopped.out_dir)

    assert stopped.exit_code == code, stopped.stderr[-3000:]
    assert written["exit_code"] == code and written["interruption"]["signal"] == name
    assert written["interruption"]["killed_after_grace"] is False
    assert f"interrupted by {name}" in stopped.stderr
    assert stopped.seconds_to_stop < 30


@pytest.mark.parametrize("which", ["ctrl_c", "sigterm"])
def test_no_process_of_the_job_outlives_record(request: pytest.FixtureRequest, which: str) -> None:
    stopped: Interrupted = request.getfixturevalue(which)

    assert [pid for pid in stopped.pids if alive(pid)] == []


@pytest.mark.parametrize(("which", "name"), [("ctrl_c", "SIGINT"), ("sigterm", "SIGTERM")])
def test_every_rank_keeps_a_partial_trace_and_the_files_agree(
    request: pytest.FixtureRequest, which: str, name: str
) -> None:
    stopped: Interrupted = request.getfixturevalue(which)

    written = manifest(stopped.out_dir)

    assert written["complete"] is False and written["world_size"] == RANKS
    for rank, entry in enumerate(written["ranks"]):
        assert (entry["status"], entry["trace"]) == ("partial", f"rank{rank}.partial.json.gz"), entry
        # torch.multiprocessing's ranks also get SIGINT as their parent dies: SIGTERM stopped them.
        assert entry["interrupted_by"] == name, entry
        assert (stopped.out_dir / entry["trace"]).is_file()
    names = sorted(path.name for path in stopped.out_dir.iterdir())
    expected = [
        name for r in range(RANKS) for name in (f"rank{r}.meta.json", f"rank{r}.partial.json.gz", f"rank{r}.probes.jsonl.gz")
    ]
    assert names == sorted(expected + ["run.json"])
    assert stray_files(stopped.out_dir) == []


@pytest.mark.parametrize("which", ["ctrl_c", "sigterm"])
def test_a_step_that_did_not_finish_is_never_counted(request: pytest.FixtureRequest, which: str) -> None:
    stopped: Interrupted = request.getfixturevalue(which)
    run_ = load_run(stopped.out_dir, workers=1)

    counts = realized_actions(run_).group_by("rank", "step", "kind").len()

    assert run_.partial
    assert counts.height > 0
    # 1F1B: each rank runs every micro-batch's F and B once per step, so a counted step is whole.
    assert counts["len"].to_list() == [MICROBATCHES] * counts.height
    assert any(cut is not None for cut in run_.cut_ns) or any("did not finish" in w for w in run_.warnings)


@pytest.mark.parametrize("command", ["report", "stragglers", "whatif"])
def test_analyses_flag_the_cut_off_traces(ctrl_c: Interrupted, command: str) -> None:
    done = run([*TRACEKIT, command, str(ctrl_c.out_dir), "--format", "json"])

    assert done.returncode == 0, done.stderr[-3000:]
    assert "did not complete its capture" in done.stderr and "interrupted by SIGINT" in done.stderr


@pytest.mark.parametrize(
    ("number", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_a_job_outside_any_window_is_stopped_with_the_shell_status(
    tmp_path: Path, number: signal.Signals, code: int
) -> None:
    record = start(record_args(tmp_path, [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(100)"]))
    assert record.stdout is not None and record.stdout.readline() == "up\n"
    os.killpg(record.pid, number)

    record.communicate(timeout=60)

    assert record.returncode == code
    assert manifest(tmp_path)["interruption"]["signal"] == number.name


def test_a_job_that_ignores_the_signal_is_killed_after_the_grace_time(tmp_path: Path) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(100)"
    record = start(record_args(tmp_path, [sys.executable, "-c", stubborn], grace_s=1))
    assert record.stdout is not None and record.stdout.readline() == "up\n"
    sent = time.monotonic()
    os.kill(record.pid, signal.SIGTERM)

    record.communicate(timeout=60)

    assert record.returncode == 143 and time.monotonic() - sent < 20
    assert manifest(tmp_path)["interruption"] == {
        "signal": "SIGTERM",
        "received_unix_ns": manifest(tmp_path)["interruption"]["received_unix_ns"],
        "killed_after_grace": True,
        "killed_at_once": False,
    }


def test_processes_a_job_leaves_behind_are_stopped(tmp_path: Path) -> None:
    leaver = (
        "import subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(100)']); print(child.pid)"
    )

    done = run(record_args(tmp_path, [sys.executable, "-c", leaver], grace_s=1), timeout_s=60)

    # The job ran no pipeline schedule: record's documented status for "nothing captured".
    assert done.returncode == NOTHING_CAPTURED_EXIT, done.stderr[-3000:]
    assert manifest(tmp_path)["left_behind"] == 1
    assert not alive(int(done.stdout.split()[0]))


def test_a_clean_run_leaves_nothing_behind(tmp_path: Path) -> None:
    # torch.multiprocessing's resource tracker is still exiting as the job's command ends.
    done = run(record_args(tmp_path, example_job("1f1b", ranks=2, microbatches=2)), timeout_s=180)

    assert done.returncode == 0, done.stderr[-3000:]
    assert manifest(tmp_path)["left_behind"] == 0
