"""Every signal a terminal, a launcher or a scheduler sends ends a capture the same way: each rank
writes what it captured, marked partial, the manifest names the signal, and the exit status is
128 + N. A wrapper passing on the Ctrl-C it also got counts once; only a second, deliberate Ctrl-C
kills at once. Real jobs, real signals, a real tmux session and a real ``timeout --foreground``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from record_runs import alive, example_job, manifest, record_args, start, stray_files, wait_for_window

from collectors.aside import trace_run_id
from collectors.stopping import STOP_SIGNALS

pytestmark = pytest.mark.slow

RANKS = 2

CUSTOM_LOOP = """
import signal, sys, time, torch, collectors
from collectors.stopping import STOP_SIGNALS
# A test runner under nohup, or a shell's background job, passes SIGHUP, SIGINT or SIGQUIT on
# ignored, and a capture leaves an ignored signal ignored, as a shell does: start from the defaults.
for number in STOP_SIGNALS:
    signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
with collectors.Capture(sys.argv[1], steps="1:", patch=False) as cap:
    for index in range(100000):
        with cap.step():
            torch.ones(64, 64) @ torch.ones(64, 64)
            time.sleep(0.01)
        if index == 3:
            print("up", flush=True)
"""
"""A one-process custom loop captured with the Python API until a signal stops it."""



@pytest.mark.parametrize("number", STOP_SIGNALS, ids=[number.name for number in STOP_SIGNALS])
def test_each_stop_signal_ends_a_rank_with_its_trace_written(tmp_path: Path, number: signal.Signals) -> None:
    out_dir = tmp_path / "out"
    loop = subprocess.Popen(
        [sys.executable, "-c", CUSTOM_LOOP, str(out_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert loop.stdout is not None and loop.stdout.readline() == "up\n"

    loop.send_signal(number)
    _, stderr = loop.communicate(timeout=60)

    # Python ends an uncaught KeyboardInterrupt by SIGINT itself, which a shell reports as 130 too.
    expected = (128 + number, -number) if number == signal.SIGINT else (128 + number,)
    assert loop.returncode in expected, stderr
    sidecar = json.loads((out_dir / "rank0.meta.json").read_text())
    assert (sidecar["status"], sidecar["interrupted_by"]) == ("partial", number.name)
    assert trace_run_id(out_dir / "rank0.partial.json.gz") == sidecar["run_id"] is not None
    assert sorted(path.name for path in out_dir.iterdir()) == [
        "rank0.meta.json", "rank0.partial.json.gz", "rank0.probes.jsonl.gz",
    ]  # fmt: skip


@dataclass(frozen=True)
class Stopped:
    """A 2-rank capture stopped by a signal while its window was open."""

    out_dir: Path
    exit_code: int | None
    stderr: str
    pids: list[int]


def _job(out_dir: Path) -> list[str]:
    job = example_job("1f1b", ranks=RANKS, microbatches=2, steps=100000)
    return record_args(out_dir, job, steps="1:", grace_s=30)


@pytest.fixture(scope="module")
def closed_terminal(tmp_path_factory: pytest.TempPathFactory) -> Stopped:
    """``record`` in a real tmux session, which is then killed: the terminal closes (SIGHUP)."""
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    out_dir = tmp_path_factory.mktemp("closed-terminal")
    log = out_dir.parent / f"{out_dir.name}.stderr"
    # A server of its own (-L): it starts with this test's environment, and no other session is touched.
    tmux = ["tmux", "-L", f"tracekit-test-{os.getpid()}"]
    command = " ".join(f"'{part}'" for part in _job(out_dir)) + f" 2> '{log}'"
    subprocess.run([*tmux, "new-session", "-d", "-s", "capture", command], check=True)
    try:
        pids = wait_for_window(out_dir, RANKS)
        time.sleep(1.0)
        subprocess.run([*tmux, "kill-session", "-t", "capture"], check=True)
        deadline = time.monotonic() + 90
        while not (out_dir / "run.json").is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)
    return Stopped(out_dir, None, log.read_text() if log.is_file() else "", pids)


@pytest.fixture(scope="module")
def wrapped_ctrl_c(tmp_path_factory: pytest.TempPathFactory) -> Stopped:
    """``timeout --foreground record ...`` and a Ctrl-C: both get SIGINT, and timeout passes it on."""
    out_dir = tmp_path_factory.mktemp("wrapped-ctrl-c")
    wrapper = start(["timeout", "--foreground", "600", *_job(out_dir)])
    try:
        pids = wait_for_window(out_dir, RANKS)
        time.sleep(1.0)
        os.killpg(wrapper.pid, signal.SIGINT)  # what the terminal does: the whole foreground group
        _, stderr = wrapper.communicate(timeout=90)
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
    return Stopped(out_dir, wrapper.returncode, stderr, pids)


@pytest.mark.parametrize(("which", "name"), [("closed_terminal", "SIGHUP"), ("wrapped_ctrl_c", "SIGINT")])
def test_every_rank_keeps_its_partial_trace_and_the_signal_is_named(
    request: pytest.FixtureRequest, which: str, name: str
) -> None:
    stopped: Stopped = request.getfixturevalue(which)

    written = manifest(stopped.out_dir)

    assert written["exit_code"] == 128 + signal.Signals[name], stopped.stderr[-3000:]
    assert written["interruption"]["signal"] == name
    assert written["interruption"]["killed_after_grace"] is False
    assert written["interruption"]["killed_at_once"] is False
    for rank, entry in enumerate(written["ranks"]):
        assert (entry["status"], entry["trace"], entry["interrupted_by"]) == (
            "partial", f"rank{rank}.partial.json.gz", name,
        ), entry  # fmt: skip
        assert "SIGKILL" not in " ".join(entry["problems"])
    assert stray_files(stopped.out_dir) == []
    assert [pid for pid in stopped.pids if alive(pid)] == []


def test_a_wrapped_ctrl_c_counts_once_and_exits_130(wrapped_ctrl_c: Stopped) -> None:
    assert wrapped_ctrl_c.exit_code == 130, wrapped_ctrl_c.stderr[-3000:]
    assert wrapped_ctrl_c.stderr.count("received SIGINT") == 1
    assert "again" not in wrapped_ctrl_c.stderr.split("received SIGINT", 1)[1].split("\n", 1)[1]
    assert "killed" not in wrapped_ctrl_c.stderr


STUBBORN = (
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(100)"
)
"""A job that ignores the signals: only a kill stops it."""


def test_a_second_deliberate_ctrl_c_kills_at_once_and_says_so(tmp_path: Path) -> None:
    record = start(record_args(tmp_path, [sys.executable, "-c", STUBBORN], grace_s=60))
    assert record.stdout is not None and record.stdout.readline() == "up\n"
    os.killpg(record.pid, signal.SIGINT)
    assert record.stderr is not None and "received SIGINT" in record.stderr.readline()
    time.sleep(1.5)  # a person reads the answer, then presses Ctrl-C again
    sent = time.monotonic()
    os.killpg(record.pid, signal.SIGINT)

    out, err = record.communicate(timeout=60)

    assert record.returncode == 130 and time.monotonic() - sent < 20, err
    stop = manifest(tmp_path)["interruption"]
    assert (stop["signal"], stop["killed_at_once"], stop["killed_after_grace"]) == ("SIGINT", True, False)


def test_a_repeated_sigterm_does_not_kill_at_once(tmp_path: Path) -> None:
    record = start(record_args(tmp_path, [sys.executable, "-c", STUBBORN], grace_s=2))
    assert record.stdout is not None and record.stdout.readline() == "up\n"
    for _ in range(3):
        os.kill(record.pid, signal.SIGTERM)  # a scheduler repeating itself
        time.sleep(0.3)

    record.communicate(timeout=60)

    stop = manifest(tmp_path)["interruption"]
    assert record.returncode == 143
    assert (stop["signal"], stop["killed_at_once"], stop["killed_after_grace"]) == ("SIGTERM", False, True)


def test_nohup_keeps_sighup_ignored(tmp_path: Path) -> None:
    ignoring = start(
        [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); os.execv(sys.executable, sys.argv[1:])",
         sys.executable, *record_args(tmp_path, [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(3)"])[1:]]
    )  # fmt: skip
    assert ignoring.stdout is not None and ignoring.stdout.readline() == "up\n"
    os.kill(ignoring.pid, signal.SIGHUP)

    ignoring.communicate(timeout=60)

    assert manifest(tmp_path)["interruption"] is None


def test_ctrl_c_under_tee_keeps_the_shell_status(tmp_path: Path) -> None:
    quiet = "import signal, sys, time; signal.signal(signal.SIGINT, lambda *_: sys.exit(130)); "
    job = [sys.executable, "-c", quiet + "print('up', flush=True); time.sleep(100)"]
    record = subprocess.Popen(
        [*record_args(tmp_path, job)[: -len(job) - 3], "--", *job],  # table output: the default
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0,
    )  # fmt: skip
    tee = subprocess.Popen(  # the same process group: a pipeline run by a shell
        ["tee", str(tmp_path / "log")], stdin=record.stdout, stdout=subprocess.PIPE, text=True,
        process_group=record.pid,
    )  # fmt: skip
    assert record.stdout is not None and tee.stdout is not None
    record.stdout.close()  # tee alone reads it now, as in `record ... | tee log`
    assert tee.stdout.readline() == "up\n"
    os.killpg(record.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches tee as well

    _, stderr = record.communicate(timeout=60)
    tee.wait(timeout=10)

    assert tee.returncode != 0  # tee was stopped by the same Ctrl-C
    assert record.returncode == 130, stderr
    assert "Traceback" not in stderr
