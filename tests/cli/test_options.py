"""Every config field of the analysis is a command-line option, declared once, and reaches the config."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest

from tracekit.cli.main import cli
from tracekit.cli.options import ANALYSIS_OPTIONS, COMPONENTS, analysis_config
from tracekit.run_analysis import AnalysisConfig

ANALYSING = ("report", "stragglers", "whatif", "dashboard")
CLI_DIR = Path(__file__).resolve().parents[2] / "tracekit" / "cli"


def test_every_component_field_of_the_analysis_config_is_an_option() -> None:
    components = {f.name for f in dataclasses.fields(AnalysisConfig)} - {"kernel_patterns", "pipelines"}
    assert set(COMPONENTS) == components
    fields = {(name, f.name) for name, cls in COMPONENTS.items() for f in dataclasses.fields(cls)}
    assert {(row.component, row.field) for row in ANALYSIS_OPTIONS} == fields
    assert all(row.help for row in ANALYSIS_OPTIONS)


@pytest.mark.parametrize("name", ANALYSING)
def test_each_analysing_command_takes_every_option_once(name: str) -> None:
    command = _command(name)
    flags = [flag for param in command.params for flag in getattr(param, "opts", [])]
    assert len(flags) == len(set(flags))
    assert {row.flag for row in ANALYSIS_OPTIONS} | {"--pipelines", "--kernel-classes"} <= set(flags)


def test_no_command_declares_an_analysis_option_by_hand() -> None:
    declared = {row.flag for row in ANALYSIS_OPTIONS} | {"--pipelines", "--kernel-classes"}
    for path in sorted(CLI_DIR.glob("*.py")):
        if path.name == "options.py":
            continue
        text = path.read_text()
        assert not [flag for flag in declared if f'"{flag}"' in text], path.name


def test_given_options_reach_the_config() -> None:
    command = _command("stragglers")
    args = ["run", "--links-min-excess-ms", "5", "--threshold", "0.5", "--replay", "durations", "--ideal", "osdi25"]
    with click.Context(command) as context:
        values = command.make_context("stragglers", args, parent=context).params
    config = analysis_config({k: v for k, v in values.items() if k not in ("source", "meta", "fmt", "out_dir", "engine")})
    assert config.links.min_excess_ms == 5.0 and config.stragglers.threshold == 0.5
    assert config.whatif.replay == "durations" and config.ideal.method == "osdi25"


def test_a_bad_value_names_its_flag() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["stragglers", "sample_traces/1f1b", "--links-min-ratio", "0.5"])
    assert result.exit_code != 0 and "--links-min-ratio" in result.output and "min_ratio" in result.output


def _command(name: str) -> click.Command:
    """A subcommand as the CLI loads it (each command's module is imported on first use)."""
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    return command
