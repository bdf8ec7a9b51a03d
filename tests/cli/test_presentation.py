"""What a person reads first: every command's answer before its tables, and tables that fit the terminal.

On the bundled DualPipeV run with a straggler on rank 2, each command's tables fit 100 columns (and
80, no value cut short; ``plan``'s Markdown tables fit 100 columns too), ``stragglers`` opens with the straggler and its saving, and ``whatif``
states the measured step that ``stragglers`` prices.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli.main import cli

RUN = str(Path(__file__).resolve().parents[2] / "sample_traces" / "dualpipev-straggler")

COMMANDS = {
    "report": ["report", RUN],
    "stragglers": ["stragglers", RUN],
    "whatif": ["whatif", RUN],
    "simulate": ["simulate", "--schedule", "dualpipev", "--pp", "4", "--microbatches", "8"],
    "sweep": [
        "sweep", "--schedules", "1f1b,zb-h1,zbv,dualpipev", "--pp", "4,8", "--microbatches", "16",
        "--step-time", "0.25", "--tokens-per-step", "4096", "--gpus", "8",
    ],
    "plan": ["plan", "--model", "deepseek-v3-671b", "--cluster", "h800-2048", "--format", "table"],
}

_TABLE_CHARACTERS = set("┏┃┡│└")


def _run(args: list[str], columns: int | None = None) -> str:
    env = {"COLUMNS": str(columns)} if columns is not None else {}
    result = CliRunner().invoke(cli, args, env=env)
    assert result.exit_code in (0, 1), result.output  # plan exits 1 only when nothing fits
    return result.stdout


@pytest.mark.parametrize("columns", [100, 80])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_tables_fit_the_terminal_and_no_value_is_cut(command: str, columns: int) -> None:
    out = _run(COMMANDS[command], columns)

    table_lines = [line for line in out.splitlines() if line[:1] in _TABLE_CHARACTERS]
    assert table_lines, out
    assert max(len(line) for line in table_lines) <= columns, out
    assert "…" not in out, out


def test_plan_markdown_tables_fit_100_columns() -> None:
    args = [arg for arg in COMMANDS["plan"] if arg not in ("--format", "table")]
    out = _run(args, 100)

    table_lines = [line for line in out.splitlines() if line.startswith("|")]
    assert out.startswith("# Pipeline plan") and len(table_lines) > 20, out
    assert max(len(line) for line in table_lines) <= 100, max(table_lines, key=len)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_answer_comes_before_the_tables_and_definitions_only_on_request(command: str) -> None:
    out = _run(COMMANDS[command], 100)
    explained = _run([*COMMANDS[command], "--explain"], 100)

    first_table = next(i for i, line in enumerate(out.splitlines()) if line[:1] in _TABLE_CHARACTERS)
    assert first_table >= 2 and out.splitlines()[0].strip(), out  # a headline, a title, then the table
    assert len(explained.splitlines()) > len(out.splitlines())


def test_wide_shows_every_column() -> None:
    narrow, wide = _run(COMMANDS["sweep"], 100), _run([*COMMANDS["sweep"], "--wide"], 400)

    assert "utilization" not in narrow and "utilization" in wide


def test_stragglers_names_the_rank_and_its_saving_first_and_whatif_states_the_same_step() -> None:
    headline = _run(COMMANDS["stragglers"], 100).splitlines()[0]
    priced = json.loads(_run([*COMMANDS["stragglers"], "--format", "json"]))["stragglers"][0]
    whatif = json.loads(_run([*COMMANDS["whatif"], "--format", "json"]))

    assert headline.startswith("Rank 2 is the straggler")
    assert f"saving of {priced['saving_ms']:.0f} ms" in " ".join(_run(COMMANDS["stragglers"], 400).split())
    assert whatif["measured_step_time"] == pytest.approx(priced["step_ms"], rel=1e-9)
    assert f"The measured step is {priced['step_ms']:.0f} ms" in whatif["headline"][0]


def test_report_stragglers_whatif_and_the_dashboard_state_one_step_and_one_saving() -> None:
    from dashboards.build import build_page
    from tracekit.run_analysis import analyse

    report = json.loads(_run(["report", RUN, "--format", "json"]))
    priced = json.loads(_run([*COMMANDS["stragglers"], "--format", "json"]))["stragglers"][0]
    page = build_page(analyse(Path(RUN)))

    steps = [row["window"] / row["steps"] for row in report["ranks"]]
    assert steps == pytest.approx([priced["step_ms"]] * len(steps), rel=1e-6)
    assert f"A step takes {priced['step_ms']:.0f} ms" in report_headline()
    assert any(f"it costs {priced['saving_ms']:.0f} ms" in line for line in page.headline)
    assert any(f"the {priced['step_ms']:.0f} ms step" in line for line in page.headline)


def report_headline() -> str:
    """The report's headline at an unbounded width, as one string."""
    return " ".join(_run(["report", RUN], 400).split("\n\n")[0].split())


@pytest.mark.parametrize(
    ("values", "decimals"),
    [([186.7, 2.355, 0.0], 1), ([3.04, 0.0955], 2), ([0.873, 0.19], 3), ([None, float("nan")], 3)],
)
def test_a_float_column_shows_one_number_of_decimals(values: list, decimals: int) -> None:
    from tracekit.present.printed import decimals_of

    assert decimals_of(values) == decimals
