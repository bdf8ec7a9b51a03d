"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.analysis.pipelines import LAYOUT_HELP, PipelineLayout
from tracekit.cli.output import Format
from tracekit.errors import TracekitError
from tracekit.perrank.engine import DaskEngine

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice([f.value for f in Format]),
    default=Format.TABLE.value,
    show_default=True,
    callback=lambda _ctx, _param, value: Format(value),
    help="table for people, json for scripts, csv for spreadsheets.",
)

explain_option = click.option(
    "--explain", is_flag=True, help="Print what each column and figure means after the tables."
)

wide_option = click.option("--wide", is_flag=True, help="Show every column, however wide the terminal.")

out_option = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write result.json and one Parquet file per table into this directory.",
)

meta_option = click.option(
    "--meta",
    "meta",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Job metadata YAML of an op-table (default: the one meta*.yaml beside it).",
)


def _layout(_ctx: click.Context, _param: click.Parameter, value: str | None) -> PipelineLayout | None:
    if value is None:
        return None
    try:
        return PipelineLayout.parse(value)
    except ValueError as error:
        raise TracekitError(f"--pipelines: {error}") from None


pipelines_option = click.option(
    "--pipelines",
    "pipelines",
    metavar="contiguous:P|strided:P",
    default=None,
    callback=_layout,
    help=LAYOUT_HELP,
)

scheduler_option = click.option(
    "--scheduler",
    "engine",
    metavar="ADDRESS",
    default=None,
    callback=lambda _ctx, _param, value: None if value is None else DaskEngine(value),
    help="Run the per-rank parse and reductions on this Dask scheduler's workers (e.g. tcp://HOST:8786), "
    "which must read the traces at the same path; default: worker processes on this machine (docs/scale.md).",
)

COST_HELP = "cost of one micro-batch through one rank's share of the model (a stage of a v-chunk schedule costs it / v)"


def cost_options(command: click.Command) -> click.Command:
    """The --f/--b/--w/--fb/--comm options shared by simulate and sweep."""
    options = (
        click.option("--f", "f", type=float, default=1.0, show_default=True, help=f"Forward: {COST_HELP}."),
        click.option(
            "--b",
            "b",
            type=float,
            default=1.0,
            show_default=True,
            help="Backward for inputs (Zero Bubble's T_B); a full backward costs b + w.",
        ),
        click.option("--w", "w", type=float, default=1.0, show_default=True, help="Backward for weights."),
        click.option(
            "--fb", "fb", type=float, default=None, help="Overlapped F&B chunk [default: f + b + w]."
        ),
        click.option(
            "--comm",
            "comm",
            type=float,
            default=0.0,
            show_default=True,
            help="Latency per hop between ranks.",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command
