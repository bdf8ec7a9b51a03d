"""``tracekit dashboard`` as a user runs it: a real subprocess writing the page and the chart images."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tracekit.analysis.memory_run import NOT_RECORDED

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "sample_traces" / "1f1b"


def tracekit(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the tracekit command line in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_dashboard_writes_the_page_and_every_chart_as_png_and_svg(tmp_path: Path) -> None:
    out = tmp_path / "report.html"

    result = tracekit(
        "dashboard",
        str(SAMPLE),
        "--out",
        str(out),
        "--png",
        str(tmp_path / "png"),
        "--svg",
        str(tmp_path / "svg"),
        "--format",
        "json",
    )

    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["out"] == str(out) and payload["bytes"] == out.stat().st_size
    assert payload["charts"] == ["timeline", "utilization", "stragglers", "whatif", "comparison"]
    assert payload["omitted"] == {
        "overlap": "no GPU events in this run: communication / compute overlap needs GPU kernels",
        "memory": NOT_RECORDED,
    }
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    for chart in payload["charts"]:
        assert (tmp_path / "png" / f"{chart}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (tmp_path / "svg" / f"{chart}.svg").read_text(encoding="utf-8")[:200]
    assert len(payload["images"]) == 10


def test_a_step_the_run_does_not_have_is_a_one_line_error(tmp_path: Path) -> None:
    result = tracekit("dashboard", str(SAMPLE), "--out", str(tmp_path / "r.html"), "--step", "9")

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["tracekit: error: step 9 is not in the run (steps [0, 1])"]
    assert not (tmp_path / "r.html").exists()
