"""``tracekit diff BASE NEW``: what changed between two runs of one job, priced in step time, and a CI gate."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.analysis.pipelines import PipelineLayout
from tracekit.cli.options import explain_option, out_option, pipelines_option, scheduler_option, wide_option
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.perrank.engine import Engine
from tracekit.present.diff import diff_markdown, diff_result, gate_line
from tracekit.run_analysis import AnalysisConfig
from tracekit.run_diff import DiffConfig, RunDiff

FORMATS = ("table", "json", "markdown")


@click.command("diff")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--fail-over",
    "fail_over",
    type=click.FloatRange(min=0),
    default=None,
    metavar="PCT",
    help="Exit 1 when NEW's median step is more than PCT percent slower than BASE's and beyond noise.",
)
@click.option(
    "--allow-different",
    is_flag=True,
    help="Compare runs whose schedule, depth, world size, micro-batches or layout differ, per stage and kind.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table for people, json for scripts, markdown for a pull-request comment.",
)
@pipelines_option
@out_option
@scheduler_option
@explain_option
@wide_option
def command(
    base: Path,
    new: Path,
    fail_over: float | None,
    allow_different: bool,
    fmt: str,
    pipelines: PipelineLayout | None,
    out_dir: Path | None,
    engine: Engine | None,
    explain: bool,
    wide: bool,
) -> None:
    """What changed from BASE to NEW (two captures of one job, or two op-tables), priced in step time."""
    config = AnalysisConfig(pipelines=pipelines)
    result = RunDiff(
        analyse_with_progress(base, config, engine=engine),
        analyse_with_progress(new, config, engine=engine),
        DiffConfig(allow_different=allow_different),
    )
    if fmt == "markdown":
        for warning in result.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(diff_markdown(result, fail_over), nl=False)
        if out_dir is not None:
            emit(diff_result(result, fail_over), Format.JSON, out_dir)
    else:
        emit(diff_result(result, fail_over), Format(fmt), out_dir, explain=explain, wide=wide)
    if fail_over is not None:
        failed, line = gate_line(result, fail_over)
        click.echo(f"tracekit diff: {line}", err=True)
        if failed:
            sys.exit(1)
