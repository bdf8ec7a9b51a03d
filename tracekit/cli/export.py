"""``tracekit export DIR --perfetto OUT.json.gz``: every rank on one aligned timeline, for Perfetto.

Parses options, prints the size estimate, writes the file (gzipped when OUT ends in ``.gz``);
the events come from ``tracekit.present.perfetto``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import click

from tracekit.analysis.pipelines import PipelineLayout
from tracekit.cli.files import output_dir, write_atomic
from tracekit.cli.options import format_option, pipelines_option, scheduler_option
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.perrank.engine import Engine
from tracekit.present.perfetto import PerfettoExport, PerfettoOptions, build_export, export_result
from tracekit.run_analysis import AnalysisConfig


def _steps(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    """``1,3`` or ``2-4`` (or both, comma-separated) as step numbers."""
    if value is None:
        return None
    steps: list[int] = []
    try:
        for part in value.split(","):
            low, dash, high = part.strip().partition("-")
            if dash and not high:
                raise ValueError(part)
            steps.extend(range(int(low), int(high or low) + 1))
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected steps like 1,3 or 2-4") from None
    if not steps:
        raise click.BadParameter(f"{value!r} names no step")
    return tuple(sorted(set(steps)))


def _write(export: PerfettoExport, path: Path) -> int:
    """Write the trace to ``path`` atomically; returns its size in bytes."""

    def write(temporary: Path) -> None:
        with (
            gzip.open(temporary, "wb", compresslevel=6) if path.suffix == ".gz" else open(temporary, "wb")
        ) as out:
            for part in export.parts():
                out.write(part)

    output_dir(path.parent)
    write_atomic(path, write)
    return path.stat().st_size


@click.command("export")
@click.argument("trace_dir", type=click.Path(path_type=Path))
@click.option(
    "--perfetto",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Chrome trace event file to write (gzipped when it ends in .gz); opens in ui.perfetto.dev.",
)
@click.option(
    "--steps", callback=_steps, default=None, help="Steps to export, e.g. 1,3 or 2-4 [default: all]."
)
@click.option(
    "--kernels/--actions-only",
    default=True,
    show_default=True,
    help="Keep the raw GPU kernels on their streams, or only the actions (smaller).",
)
@click.option(
    "--ideal/--no-ideal",
    default=True,
    show_default=True,
    help="Add the ideal timeline as a second process group.",
)
@pipelines_option
@format_option
@scheduler_option
def command(
    trace_dir: Path,
    out: Path,
    steps: tuple[int, ...] | None,
    kernels: bool,
    ideal: bool,
    pipelines: PipelineLayout | None,
    fmt: Format,
    engine: Engine | None,
) -> None:
    """Every rank's actions, GPU streams, dependencies, critical path, stragglers and ideal in one trace."""
    analysis = analyse_with_progress(trace_dir, AnalysisConfig(pipelines=pipelines), engine=engine)
    export = build_export(analysis, PerfettoOptions(kernels=kernels, ideal=ideal, steps=steps))
    click.echo(f"tracekit: writing {out}: {export.estimate().sentence()}", err=True)
    written = _write(export, out)
    emit(export_result(export, str(out), written), fmt)
