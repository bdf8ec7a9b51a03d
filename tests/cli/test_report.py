"""``tracekit report`` as a user runs it: a real subprocess, its stdout, stderr and exit status."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest


def tracekit(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the tracekit command line in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_json_report_has_the_documented_shape(two_rank_run: Path) -> None:
    result = tracekit("report", str(two_rank_run), "--format", "json")

    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert [rank["rank"] for rank in payload["ranks"]] == [0, 1]
    first = payload["ranks"][0]
    assert set(first) >= {"rank", "bubble_fraction", "busy", "window", "actions"}
    assert first["actions"] == {"F": 2, "B": 2, "I": 0, "W": 0}
    assert 0 <= first["bubble_fraction"] < 1 and first["busy"] <= first["window"]
    assert set(payload["schedule"][0]) >= {"rank", "stage", "kind", "microbatch", "step", "start", "end"}
    assert len(payload["schedule"]) == 8 and payload["run"]["partial"] is False


def test_table_report_and_out_dir(two_rank_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"

    result = tracekit("report", str(two_rank_run), "--out", str(out))

    assert result.returncode == 0, result.stderr
    assert "window ms" in result.stdout and "busy ms" in result.stdout
    assert {path.name for path in out.iterdir()} == {
        "result.json",
        "ranks.parquet",
        "replicas.parquet",
        "steps.parquet",
        "schedule.parquet",
    }


def test_csv_report_is_one_row_per_rank(two_rank_run: Path) -> None:
    result = tracekit("report", str(two_rank_run), "--format", "csv")

    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("rank,") and len(lines) == 3


@pytest.mark.parametrize(
    ("setup", "fault"),
    [
        (lambda root: None, "no trace files"),
        (lambda root: (root / "rank0.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage"), "corrupt gzip"),
        (lambda root: (root / "rank0.json").write_text(""), "empty file"),
        (lambda root: (root / "rank0.json").write_text('{"traceEvents": [{"ph"'), "not valid JSON"),
    ],
    ids=["no-traces", "corrupt-gzip", "empty", "truncated-json"],
)
def test_bad_input_is_one_line_with_exit_2(tmp_path: Path, setup, fault: str) -> None:
    root = tmp_path / "bad"
    root.mkdir()
    setup(root)

    result = tracekit("report", str(root))

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and fault in result.stderr
    assert "Traceback" not in result.stderr and str(root) in result.stderr


def test_cpu_traces_without_labels_is_one_line(tmp_path: Path, make_trace) -> None:
    root = tmp_path / "unlabelled"
    root.mkdir()
    make_trace(root / "rank0.json.gz", ["forward", "backward"])

    result = tracekit("report", str(root))

    assert result.returncode == 2 and "no schedule labels" in result.stderr
    assert "Traceback" not in result.stderr


def test_gpu_traces_without_labels_report_gpu_figures(shared: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"

    result = tracekit(
        "report", str(shared / "traces" / "param-dlrm-8rank"), "--format", "json", "--out", str(out)
    )

    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["ranks"] == [] and payload["schedule"] == []
    assert [row["rank"] for row in payload["gpu"]["ranks"]] == list(range(8))
    assert {row["comm_class"] for row in payload["gpu"]["overlap"]} == {"p2p", "dp_collective", "all"}
    assert any("no schedule labels" in warning for warning in payload["warnings"])
    assert {path.name for path in out.iterdir()} == {
        "result.json",
        "gpu_ranks.parquet",
        "gpu_overlap.parquet",
        "gpu_streams.parquet",
    }


def test_hta_compatible_json_matches_hta(shared: Path) -> None:
    expected = {
        int(row["rank"]): row
        for row in csv.DictReader((shared / "expected" / "hta-0.5.0-hta-sampled-2rank.csv").open())
    }

    result = tracekit(
        "report", str(shared / "traces" / "hta-sampled-2rank"), "--hta-compatible", "--format", "json"
    )

    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)["ranks"]
    assert [row["rank"] for row in ranks] == [0, 1]
    for row in ranks:
        for column in ("idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct"):
            assert abs(row[column] - float(expected[row["rank"]][column])) <= 0.1, (row["rank"], column)


def test_bad_kernel_classes_file_is_one_line(shared: Path, tmp_path: Path) -> None:
    config = tmp_path / "classes.toml"
    config.write_text('[[kernel_class]]\npattern = "^my_a2a"\nclass = "network"\n')

    result = tracekit(
        "report", str(shared / "traces" / "deepseek-v3-dualpipe-chunk"), "--kernel-classes", str(config)
    )

    assert result.returncode == 2 and "kernel class 'network'" in result.stderr
    assert str(config) in result.stderr and result.stderr.count("\n") == 1
