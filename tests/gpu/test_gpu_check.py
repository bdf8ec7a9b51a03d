"""``benchmarks/gpu_check.py``: its one skip line on CPU, and the checks it applies, on real traces here."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.run_analysis import analyse

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gpu_check = _load()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _copy(source: Path, tmp_path: Path) -> Path:
    root = tmp_path / source.name
    shutil.copytree(source, root, ignore=shutil.ignore_patterns(".tracekit-cache"))
    root.chmod(0o755)
    return root


@pytest.mark.skipif(_cuda(), reason="a CUDA device is here: the skip line is for machines without one")
def test_without_cuda_it_prints_one_line_and_exits_0(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [gpu_check.SKIP_LINE]
    assert not (tmp_path / "out").exists()


def test_arguments_parse_and_a_window_without_warm_up_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = gpu_check.parse_args(["--out", "/tmp/x", "--steps", "10", "--hidden", "1024", "--ranks", "2"])
    assert (args.out, args.steps, args.hidden, args.ranks) == (Path("/tmp/x"), 10, 1024, 2)
    assert gpu_check.parse_args([]).ranks is None

    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--steps", "5"])
    assert "--steps must be >= 6" in capsys.readouterr().err


def test_on_a_real_nccl_trace_streams_and_overlap_pass_and_the_missing_labels_are_named(
    shared: Path, tmp_path: Path
) -> None:
    analysis = analyse(_copy(shared / "traces" / "hta-sampled-2rank", tmp_path))

    checks = {check.name: check for check in gpu_check.trace_checks(analysis, expect_comm=True)}

    assert checks["kernels on CUDA streams"].passed, checks["kernels on CUDA streams"].detail
    assert checks["comm/compute overlap on real streams"].passed
    assert "rank 0:" in checks["comm/compute overlap on real streams"].detail
    assert checks["kernels inside each label"].passed is False
    assert checks["GPU clock chosen"].passed is False


def test_on_a_cpu_capture_every_gpu_check_fails_with_its_reason(tmp_path: Path) -> None:
    analysis = analyse(_copy(REPO / "sample_traces" / "1f1b", tmp_path))

    checks = {check.name: check for check in gpu_check.trace_checks(analysis, expect_comm=False)}

    assert checks["kernels on CUDA streams"].passed is False
    assert "ranks without kernels: [0, 1, 2, 3]" in checks["kernels on CUDA streams"].detail
    assert checks["GPU clock chosen"].passed is False and "cpu clock" in checks["GPU clock chosen"].detail
    assert checks["comm/compute overlap on real streams"].passed is None


def test_overhead_is_the_median_profiled_step_against_the_uncaptured_one() -> None:
    check = gpu_check.overhead_check([10.0, 11.0, 12.0], [11.0, 12.1, 13.0])

    assert check.passed and "+10.0%" in check.detail
    assert gpu_check.overhead_check([], [1.0]).passed is False


@pytest.mark.parametrize(
    ("clock", "end", "passed"), [("cuda", 900, True), ("cpu", 900, False), ("cuda", 50, False)]
)
def test_live_timers_must_be_cuda_events_on_every_rank(clock: str, end: int, passed: bool) -> None:
    steps = [
        {"t": "step", "r": rank, "s": step, "clk": clock, "a": [[rank, "F", 0, 100, end, 0]]}
        for rank in (0, 1)
        for step in (1, 2)
    ]

    assert gpu_check.live_check(steps, ranks=2).passed is passed
    assert gpu_check.live_check(steps[:2], ranks=2).passed is False  # rank 1 never reported


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA device: torch.cuda.is_available() is False")
def test_the_gpu_check_passes_on_a_real_gpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_live_listener_hears_every_rank_of_a_real_cpu_session_and_calls_its_timers_cpu(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "examples.pipeline_job", "--schedule", "1f1b", "--ranks", "2"]
    command += ["--microbatches", "4", "--steps", "3", "--hidden", "32"]

    messages = gpu_check.live_summaries(command, tmp_path / "live", timeout_s=240)

    check = gpu_check.live_check(messages, ranks=2)
    assert {m["r"] for m in messages if m.get("t") == "step"} == {0, 1}
    assert check.passed is False and "clocks ['cpu']" in check.detail
