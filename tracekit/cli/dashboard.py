"""``tracekit dashboard DIR --out report.html``: one offline HTML page of the run's charts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli.options import analysis_config, analysis_options, format_option, scheduler_option
from tracekit.cli.output import Format, Result, Table, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.perrank.engine import Engine


@click.command("dashboard")
@click.argument("trace_dir", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="HTML file to write (self-contained: opens offline).",
)
@click.option("--step", type=int, default=None, help="Training step to draw [default: the first].")
@click.option("--all-steps", is_flag=True, help="Draw every step instead of one.")
@click.option(
    "--png",
    "png_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write each chart as PNG into this directory.",
)
@click.option(
    "--svg",
    "svg_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write each chart as SVG into this directory.",
)
@analysis_options
@click.option(
    "--baseline",
    "baseline",
    type=click.Path(path_type=Path),
    default=None,
    help="A run of the same job to compare against (tracekit diff BASELINE TRACE_DIR), drawn as a last section.",
)
@format_option
@scheduler_option
def command(
    trace_dir: Path,
    out: Path,
    step: int | None,
    all_steps: bool,
    png_dir: Path | None,
    svg_dir: Path | None,
    fmt: Format,
    engine: Engine | None,
    baseline: Path | None = None,
    **options: Any,
) -> None:
    """Realized schedule beside its ideal, utilization, overlap, stragglers and schedule comparison."""
    # Imported here: altair and vl-convert cost half a second that no other command should pay.
    from dashboards.build import DashboardConfig
    from dashboards.write import write_dashboard

    config = DashboardConfig(step=step, all_steps=all_steps)
    config_of_run = analysis_config(options)
    analysis = analyse_with_progress(trace_dir, config_of_run, engine=engine)
    base = None if baseline is None else analyse_with_progress(baseline, config_of_run, engine=engine)
    written = write_dashboard(analysis, out, config, png_dir, svg_dir, base)
    table = Table(
        title=f"{trace_dir}: dashboard written",
        frame=written.summary(),
        notes=tuple(f"{key} omitted: {why}" for key, why in written.omitted.items()),
        name="dashboard",
    )
    emit(Result(payload=written.payload(), tables=(table,), warnings=written.warnings), fmt)
