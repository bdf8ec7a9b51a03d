"""``tracekit plan`` end to end, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .specs import EXAMPLES, SAMPLE_TRACES


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", "plan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_markdown_report_for_deepseek_v3() -> None:
    result = _plan("--spec", str(EXAMPLES / "deepseek-v3.toml"))

    assert result.returncode == 0, result.stderr
    assert "## Recommendation: dualpipe, PP16, 120 micro-batches" in result.stdout


def test_json_from_presets_and_flags() -> None:
    result = _plan(
        "--model", "llama3-70b", "--cluster", "h100-1024", "--sequence-length", "8192", "--global-batch", "2048",
        "--pp", "8", "--format", "json",
    )  # fmt: skip
    payload = json.loads(result.stdout)

    # the preset's published setting brings full recomputation, without which PP8 does not fit
    assert result.returncode == 0, result.stderr
    assert payload["recommendation"]["pp"] == 8


def test_model_preset_alone_plans_with_its_published_training_setting() -> None:
    result = _plan("--model", "deepseek-v3-671b", "--cluster", "h800-2048", "--format", "json")
    payload = json.loads(result.stdout)

    assert result.returncode == 0, result.stderr
    assert payload["recommendation"] is not None
    assert {row["pp"] for row in payload["alternatives"]} >= {8, 16}


def test_nothing_fits_exits_1_with_the_alternatives() -> None:
    result = _plan(
        "--model", "llama3-70b", "--cluster", "h100-1024", "--pp", "8", "--gpu-memory-gib", "24", "--format", "json"
    )  # fmt: skip
    payload = json.loads(result.stdout)

    assert result.returncode == 1
    assert payload["recommendation"] is None and payload["alternatives"]
    assert all(not row["fits"] for row in payload["alternatives"])


def test_json_recommendation_has_the_issues_keys() -> None:
    result = _plan("--spec", str(EXAMPLES / "llama3-70b.toml"), "--format", "json")
    payload = json.loads(result.stdout)

    assert result.returncode == 0, result.stderr
    assert {"schedule", "pp", "microbatches", "bubble_fraction", "reasons"} <= set(payload["recommendation"])
    assert payload["recommendation"]["schedule"] != "dualpipe"
    assert len(payload["alternatives"]) == 7


def test_calibrate_with_a_captured_run() -> None:
    result = _plan(
        "--spec", str(EXAMPLES / "llama3-70b.toml"), "--calibrate", str(SAMPLE_TRACES / "1f1b"), "--format", "json"
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assumptions = json.loads(result.stdout)["assumptions"]
    assert assumptions[-1].startswith("forward x ")
    # a CPU toy is not the cluster's hardware: said on stderr and in the report
    assert "ran on CPUs, not on the cluster's GPUs (h100-1024)" in result.stderr
    assert any("ran on CPUs" in line for line in assumptions)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--cluster", "h100-64"), "[model]: missing layers, hidden, heads, ffn, vocab"),
        (("--cluster", "tpu-8"), "unknown cluster preset 'tpu-8'"),
        (("--spec", "missing.toml"), "missing.toml: spec file not found"),
    ],
)
def test_bad_requests_are_one_line_errors(args: tuple[str, ...], message: str) -> None:
    result = _plan(*args)

    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2
    assert len(lines) == 1 and lines[0].startswith(f"tracekit: error: {message}")
