"""The diff on the bundled sample captures and the shared op-tables: identities, refusals, outputs, the gate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit
from tracekit.changes.explain import EXPLAINED_SCHEMA
from tracekit.changes.steps import NoiseConfig, regressed, step_change
from tracekit.changes.work import RANK_CHANGE_SCHEMA, WORK_SCHEMA
from tracekit.errors import TracekitError
from tracekit.present.diff import diff_markdown, diff_result, gate_line, headline
from tracekit.run_diff import DiffConfig, RunDiff

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture(scope="module")
def analyses() -> dict[str, tracekit.RunAnalysis]:
    """The sample runs these tests compare, each analysed once."""
    return {
        name: tracekit.analyse(SAMPLES / name) for name in ("1f1b", "zbv", "dualpipev", "dualpipev-straggler")
    }


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", "diff", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_against_itself_changes_nothing(analyses) -> None:
    result = RunDiff(analyses["1f1b"], analyses["1f1b"])
    assert result.step_change.change_ms == 0 and not result.step_change.beyond_noise
    rows = result.explanation.rows
    assert dict(rows.schema) == EXPLAINED_SCHEMA
    assert (rows["saving_ms"] == 0).all() and (rows["own_change_ms"] == 0).all()
    assert result.explanation.all_saving_ms == 0 and result.explanation.unexplained_ms == 0
    assert result.work.is_empty() and dict(result.work.schema) == WORK_SCHEMA
    assert dict(result.ranks.schema) == RANK_CHANGE_SCHEMA
    assert headline(result).startswith("no change beyond noise")
    assert gate_line(result, 10) == (False, gate_line(result, 10)[1])


def test_the_sample_straggler_is_named_first(analyses) -> None:
    result = tracekit.diff(analyses["dualpipev"], analyses["dualpipev-straggler"])
    top = result.explanation.rows.row(0, named=True)
    assert result.step_change.beyond_noise
    assert (top["level"], top["rank"]) == ("rank", 2)
    assert headline(result).startswith("NEW is") and "rank 2 explains" in headline(result)
    # The singles, their interactions and what replay does not model add up to the mean change.
    e = result.explanation
    assert e.singles_ms + e.interactions_ms + e.unexplained_ms == pytest.approx(e.mean_change_ms)


def test_the_rank_row_is_its_groups_together(analyses) -> None:
    rows = tracekit.diff(analyses["dualpipev"], analyses["dualpipev-straggler"]).explanation.rows
    rank = rows.filter((pl.col("level") == "rank") & (pl.col("rank") == 2))
    groups = rows.filter((pl.col("level") == "group") & (pl.col("rank") == 2))
    assert rank["own_change_ms"][0] == pytest.approx(groups["own_change_ms"].sum())
    assert rank["ops"][0] == groups["ops"].sum()


def test_different_schedules_are_refused_unless_allowed(analyses) -> None:
    for part in ("steps", "step_change", "explanation", "work"):
        with pytest.raises(TracekitError, match="schedule 1f1b vs zbv"):
            getattr(RunDiff(analyses["1f1b"], analyses["zbv"]), part)
    allowed = RunDiff(analyses["1f1b"], analyses["zbv"], DiffConfig(allow_different=True))
    assert allowed.comparability.key == ("stage", "kind")
    assert allowed.explanation.rows.filter(pl.col("level") == "rank").is_empty()
    assert any("compared per stage and kind" in w for w in allowed.warnings)


def test_outputs_carry_the_headline_first(analyses) -> None:
    result = tracekit.diff(analyses["dualpipev"], analyses["dualpipev-straggler"])
    payload = diff_result(result, fail_over_pct=10).payload
    assert next(iter(payload)) == "headline" and payload["gate"]["failed"] is True
    markdown = diff_markdown(result, 10)
    assert markdown.startswith(f"**{headline(result)}**")
    assert "| rank 2 |" in markdown


@pytest.mark.slow
def test_the_cli_gate_and_formats() -> None:
    base, new = str(SAMPLES / "dualpipev"), str(SAMPLES / "dualpipev-straggler")
    failed = _cli(base, new, "--fail-over", "10", "--format", "json")
    assert failed.returncode == 1 and json.loads(failed.stdout)["gate"]["failed"]
    assert (
        failed.stderr.strip().startswith("tracekit diff: regression") and "rank 2 explains" in failed.stderr
    )
    passed = _cli(base, base, "--fail-over", "10")
    assert passed.returncode == 0 and passed.stdout.startswith("no change beyond noise")
    table = _cli(base, new)
    rows = [line for line in table.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table.returncode == 0 and rows and max(len(line) for line in rows) <= 100


@pytest.mark.slow
def test_a_missing_run_is_one_line() -> None:
    out = _cli(str(SAMPLES / "1f1b"), str(SAMPLES / "absent"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "absent" in out.stderr


def test_two_op_tables_are_compared(shared: Path) -> None:
    table = next((shared / "traces" / "whatif-optable-SE").glob("trace-*.parquet"))
    result = tracekit.diff(table, table)
    assert result.step_change.change_ms == 0
    assert (result.explanation.rows["saving_ms"] == 0).all()
    assert result.ranks is None and result.explanation.rows.filter(pl.col("level") == "link").is_empty()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(1, 1000), min_size=1, max_size=12),
    st.lists(st.floats(1, 1000), min_size=1, max_size=12),
    st.floats(0, 100),
)
def test_the_gate_fails_only_beyond_noise_and_over_the_threshold(
    base: list[float], new: list[float], pct: float
) -> None:
    change = step_change(np.array(base), np.array(new), NoiseConfig())
    assert change.noise_ms >= 0.05 * change.base.median_ms
    assert change.beyond_noise == (abs(change.change_ms) > change.noise_ms)
    if regressed(change, pct):
        assert change.change_ms > change.noise_ms and change.change_pct > pct
    same = step_change(np.array(base), np.array(base))
    assert same.change_ms == 0 and not same.beyond_noise and not regressed(same, 0)


def test_the_dashboard_section_draws_both_timelines_and_the_explained_change(analyses) -> None:
    from dashboards.diff import both_timelines, diff_section

    result = tracekit.diff(analyses["dualpipev"], analyses["dualpipev-straggler"])
    frame, caption = both_timelines(result, step=None)
    assert set(frame["timeline"].unique()) == {"base", "new"}
    starts = frame.group_by("timeline").agg(pl.col("start_ms").min())
    assert (starts["start_ms"] == 0).all() and "one time axis" in caption
    section = diff_section(result)
    assert [view.key for view in section.views] == ["diff-timelines", "diff-explained"]
    assert section.notes[0] == headline(result)


@pytest.mark.slow
def test_dashboard_with_a_baseline_ends_with_the_diff_section(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    done = subprocess.run(
        [sys.executable, "-m", "tracekit", "dashboard", str(SAMPLES / "dualpipev-straggler"), "--baseline",
         str(SAMPLES / "dualpipev"), "--out", str(out), "--format", "json"],
        check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["charts"][-2:] == ["diff-timelines", "diff-explained"]
