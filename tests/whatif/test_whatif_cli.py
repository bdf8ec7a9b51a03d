"""``tracekit whatif`` and ``tracekit stragglers`` end to end: JSON contract, tables, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli.main import cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_whatif_on_an_optable_reports_the_contracted_fields(shared: Path) -> None:
    root = shared / "traces" / "whatif-optable-ST"

    payload = _json("whatif", str(root / "trace-ST.parquet"), "--meta", str(root / "meta-ST.yaml"))

    contract = {
        "slowdown",
        "ideal_step_time",
        "realized_step_time",
        "by_optype",
        "by_dp_rank",
        "by_stage",
        "by_rank",
        "ms",
        "mw",
    }
    assert contract <= set(payload)
    assert payload["slowdown"] == pytest.approx(1.1787, abs=1e-4)
    assert list(payload["by_stage"]) == ["3", "0", "1", "2"]
    assert (payload["ms"], payload["mw"]) == pytest.approx((1.2194, 0.0314), abs=1e-4)
    assert payload["realized_step_time"] / payload["ideal_step_time"] == pytest.approx(payload["slowdown"])
    assert payload["clock"] is None and payload["named_schedule"] is None


def test_whatif_on_a_run_compares_with_the_named_schedule() -> None:
    payload = _json("whatif", str(SAMPLES / "dualpipev-straggler"))

    named = payload["named_schedule"]
    assert named["schedule"] == "dualpipev"
    parts = named["stragglers_ms"] + named["exposed_comm_and_rest_ms"] + named["order_ms"]
    assert parts == pytest.approx(named["gain_lost_ms"])
    assert payload["clock"] == "cpu"
    assert payload["clock_alignment"]["offsets"][0]["host"] == "vm"
    assert payload["by_dp_rank"].keys() == {"0"} and set(payload["by_rank"]) == {"0", "1", "2", "3"}


def test_stragglers_json_lists_the_slow_rank_first_with_a_sentence() -> None:
    payload = _json("stragglers", str(SAMPLES / "dualpipev-straggler"))

    first = payload["stragglers"][0]
    assert {"rank", "kind", "score"} <= set(first) and first["rank"] == 2 and first["score"] < 0.75
    assert first["summary"].startswith("rank 2 runs ")
    assert payload["threshold"] == 0.75
    assert set(first) >= {"rank", "kind", "score", "reference", "saving_ms", "step_ms", "step_ms_without"}
    assert first["step_ms_without"] == pytest.approx(first["step_ms"] - first["saving_ms"])
    # run.json records each stage's work, so rank 0 (the V's first and last stage, no peers) is
    # judged against its expected cost and no rank is left unjudged.
    assert payload["unjudged"] == []
    references = {row["rank"]: row["reference"] for row in payload["ranks"]}
    assert references == {0: "expected", 1: "peers", 2: "peers", 3: "peers"}
    assert isinstance(payload["links"], list) and not any(link["flagged"] for link in payload["links"])


def test_tables_print_for_people(shared: Path) -> None:
    result = CliRunner().invoke(
        cli, ["whatif", str(shared / "traces" / "whatif-optable-SE" / "trace-SE.parquet")]
    )

    assert result.exit_code == 0 and "share (M_S) 69%" in result.stdout.replace("\n", " ").replace("  ", " ")


@pytest.mark.parametrize("command", ["whatif", "stragglers"])
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, command: str) -> None:
    table = tmp_path / "nothing.parquet"
    table.write_bytes(b"not parquet")
    (tmp_path / "meta.yaml").write_text("dp_size: 1\npp_size: 1\n")

    result = CliRunner().invoke(cli, [command, str(table)])

    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tracekit: error: {table}: unreadable op-table")


@pytest.mark.parametrize(
    ("command", "layout", "fault"),
    [
        (
            "whatif",
            "blocked:4",
            "--pipelines: expected contiguous:P or strided:P (P pipeline ranks), not 'blocked:4'",
        ),
        ("stragglers", "contiguous:3", "--pipelines contiguous:3: 4 ranks do not form pipelines of 3 ranks"),
        ("report", "strided:0", "--pipelines: a pipeline needs at least one rank, not 0"),
    ],
)
def test_a_layout_that_cannot_be_used_is_one_line_naming_the_fault(
    command: str, layout: str, fault: str
) -> None:
    result = CliRunner().invoke(cli, [command, str(SAMPLES / "1f1b"), "--pipelines", layout])

    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("tracekit: error: ") and line.endswith(fault)


def test_a_single_pipeline_layout_gives_the_figures_of_no_layout() -> None:
    plain = _json("whatif", str(SAMPLES / "1f1b"))

    given = _json("whatif", str(SAMPLES / "1f1b"), "--pipelines", "contiguous:4")

    assert given["slowdown"] == plain["slowdown"] and given["by_dp_rank"] == plain["by_dp_rank"]
    assert given["replicas"] == 1


def test_an_optable_names_its_data_parallel_ranks_so_a_layout_is_refused(shared: Path) -> None:
    table = shared / "traces" / "whatif-optable-ST" / "trace-ST.parquet"

    result = CliRunner().invoke(cli, ["whatif", str(table), "--pipelines", "contiguous:4"])

    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert (
        line
        == f"tracekit: error: {table}: --pipelines is for trace directories: an op-table names each op's data-parallel rank"
    )
