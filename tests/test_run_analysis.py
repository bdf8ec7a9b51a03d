"""One road: every command and the dashboard agree to the last digit, and say the same on every run.

Each command is run on its own (its own process for the determinism test, its own invocation and
its own ``RunAnalysis`` for the consistency test), as a user runs them, and their outputs compared.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from dashboards.encoding import inline
from tracekit.cli.main import cli
from tracekit.perrank.engine import LocalEngine
from tracekit.present.report import report_payload
from tracekit.present.result import to_json
from tracekit.present.stragglers import stragglers_payload
from tracekit.present.whatif import whatif_payload
from tracekit.run_analysis import analyse
from tracekit.trace.run import CACHE_DIR_NAME

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted(path.name for path in (REPO / "sample_traces").iterdir() if (path / "run.json").exists())
SHARED_TRACES = ("deepseek-v3-dualpipe-chunk", "hta-sampled-2rank", "param-dlrm-8rank")
OPTABLES = ("whatif-optable-ST/trace-ST.parquet", "whatif-optable-SE/trace-SE.parquet")

_PAYLOADS = """
import sys
from tracekit.present.result import to_json
from tracekit.present.stragglers import stragglers_payload
from tracekit.present.whatif import whatif_payload
from tracekit.run_analysis import analyse
analysis = analyse(sys.argv[1])
sys.stdout.buffer.write(to_json(whatif_payload(analysis)) + b"\\n" + to_json(stragglers_payload(analysis)))
"""


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _json(*args: str) -> dict:
    code, out, err = _invoke(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _as_drawn(values: dict) -> dict:
    """``values`` rounded as the page embeds numbers (``dashboards.encoding.inline``)."""
    rows = inline(pl.DataFrame({"key": list(values), "value": list(values.values())}, strict=False))["values"]
    return {row["key"]: row["value"] for row in rows}


def _embedded(html: str, key: str) -> list[dict]:
    """The data rows of the chart ``key`` as the page embeds it."""
    match = re.search(rf'<script type="application/json" id="spec-{key}">(.*?)</script>', html, re.DOTALL)
    assert match is not None, f"no {key} chart on the page"
    return [row for rows in json.loads(match.group(1))["datasets"].values() for row in rows]


FRESH_PROCESSES = 3
"""Fresh interpreters per sample, each with its own hash seed: three catch an output that flips with
the seed at least 75% of the time (a coin per process), at three fifths of five's cost."""


@pytest.mark.parametrize("sample", SAMPLES)
def test_whatif_and_stragglers_are_byte_identical_over_fresh_processes(sample: str) -> None:
    outputs = {
        subprocess.run(
            [sys.executable, "-c", _PAYLOADS, str(REPO / "sample_traces" / sample)],
            capture_output=True,
            check=True,
            timeout=300,
        ).stdout
        for _ in range(FRESH_PROCESSES)
    }

    assert len(outputs) == 1


def test_any_number_of_worker_processes_gives_the_same_bytes(tmp_path: Path) -> None:
    root = tmp_path / "run"
    shutil.copytree(
        REPO / "sample_traces" / "dualpipev-straggler", root, ignore=shutil.ignore_patterns(CACHE_DIR_NAME)
    )
    documents = []
    for workers in (1, 3):
        shutil.rmtree(root / CACHE_DIR_NAME, ignore_errors=True)
        analysis = analyse(root, engine=LocalEngine(workers=workers))
        documents.append(
            to_json(report_payload(analysis))
            + to_json(whatif_payload(analysis))
            + to_json(stragglers_payload(analysis))
        )

    assert documents[0] == documents[1]


@pytest.mark.parametrize("sample", SAMPLES)
def test_report_stragglers_whatif_and_dashboard_agree_on_a_sample(sample: str, tmp_path: Path) -> None:
    source = str(REPO / "sample_traces" / sample)
    page = tmp_path / "page.html"

    report = _json("report", source)
    stragglers = _json("stragglers", source)
    whatif = _json("whatif", source)
    assert _invoke("dashboard", source, "--out", str(page))[0] == 0
    html = page.read_text(encoding="utf-8")

    # One clock for all.
    assert report["clock"] == stragglers["clock"] == whatif["clock"] == "cpu"
    # Per-rank bubble: the report's and the dashboard's utilization chart, to the last digit.
    bubble = {row["rank"]: row["bubble_fraction"] for row in report["ranks"]}
    drawn = {
        row["rank"]: row["bubble_fraction"]
        for row in _embedded(html, "utilization")
        if row["timeline"] == "realized"
    }
    assert drawn == _as_drawn(bubble)
    # Step times: the report's step windows are what-if's measured steps, and stragglers' step.
    windows = sorted({(row["step"], row["window"]) for row in report["steps"]})
    assert [(row["step"], row["measured_ms"]) for row in whatif["steps"]] == windows
    assert {row["step_ms"] for row in stragglers["scores"]} == {whatif["measured_step_time"]}
    # Stragglers: the dashboard's heatmap shows the stragglers command's scores.
    judged: dict[str, list[float]] = {}
    for row in stragglers["scores"]:  # a cell shows the rank's worst work of the kind
        judged.setdefault(f"{row['rank']} {row['kind']}", [])
        if row["score"] is not None:
            judged[f"{row['rank']} {row['kind']}"].append(1 / row["score"])
    slowdowns = {key: max(values) if values else None for key, values in judged.items()}
    drawn_cells = _embedded(html, "stragglers")
    cells = {f"{row['worst_rank']} {row['kind']}": row["slowdown"] for row in drawn_cells}
    assert cells == _as_drawn(slowdowns)
    # Flagged stragglers: the cells the heatmap outlines are the stragglers the command names.
    named = {(row["rank"], row["kind"]) for row in stragglers["stragglers"]}
    assert {(row["worst_rank"], row["kind"]) for row in drawn_cells if row["flagged"]} == named
    assert (sample == "dualpipev-straggler") == bool(named)
    # What-if: the dashboard's attribution bars are the whatif command's.
    drawn_whatif = _embedded(html, "whatif")
    assert [row["overall"] for row in drawn_whatif if "overall" in row] == [
        _as_drawn({0: whatif["slowdown"]})[0]
    ]
    bars = {
        f"{row['dimension']} {row['group']}": row["slowdown"] for row in drawn_whatif if "dimension" in row
    }
    attribution = {
        f"{dimension} {group}": value
        for dimension in ("optype", "dp_rank", "stage", "rank")
        for group, value in whatif[f"by_{dimension}"].items()
    }
    assert bars == _as_drawn({key: attribution[key] for key in bars})


@pytest.mark.parametrize("trace", SHARED_TRACES)
def test_commands_agree_on_the_shared_gpu_traces_without_schedule_labels(
    trace: str, shared: Path, tmp_path: Path
) -> None:
    source = str(shared / "traces" / trace)
    page = tmp_path / "page.html"

    report = _json("report", source)
    refused = [_invoke(command, source, "--format", "json") for command in ("stragglers", "whatif")]
    assert _invoke("dashboard", source, "--out", str(page))[0] == 0
    html = page.read_text(encoding="utf-8")

    # No labels: the report has no pipeline figures, stragglers and what-if refuse in the same line.
    assert report["ranks"] == [] and report["clock"] is None and report["gpu"] is not None
    assert [code for code, _, _ in refused] == [2, 2]
    assert refused[0][2] == refused[1][2] and "no schedule labels" in refused[0][2]
    assert refused[0][2].count("\n") == 1
    # The dashboard draws no utilization, and the overlap it draws is the report's.
    assert 'id="spec-utilization"' not in html
    overlap = {(row["rank"], row["comm_class"]) for row in report["gpu"]["overlap"]}
    cells = [row for row in _embedded(html, "overlap") if "ranks" in row and row["comm_class"] != "all"]
    assert cells and {(int(row["ranks"]), row["comm_class"]) for row in cells} <= overlap


@pytest.mark.parametrize("table", OPTABLES)
def test_stragglers_and_whatif_agree_on_the_op_tables(table: str, shared: Path) -> None:
    source = str(shared / "traces" / table)

    stragglers = _json("stragglers", source)
    whatif = _json("whatif", source)

    assert {row["step_ms"] for row in stragglers["scores"]} == {whatif["measured_step_time"]}
    assert stragglers["clock"] is whatif["clock"] is None
    code, _, err = _invoke("report", source)
    assert code != 0 and err.count("\n") == 1
