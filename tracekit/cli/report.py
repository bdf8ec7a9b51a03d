"""``tracekit report DIR``: per-rank bubble fractions and the realized schedule of a captured run."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.analysis.report import DEFINITIONS, build_report, rank_table, report_payload
from tracekit.cli.options import format_option, out_option
from tracekit.cli.output import Format, Result, Table, emit
from tracekit.cli.progress import load_run_with_progress


@click.command("report")
@click.argument("trace_dir", type=click.Path(path_type=Path))
@format_option
@out_option
def command(trace_dir: Path, fmt: Format, out_dir: Path | None) -> None:
    """Per-rank busy time, bubble fraction and action counts of the run in TRACE_DIR."""
    report = build_report(load_run_with_progress(trace_dir))
    payload = report_payload(report)
    title = f"{trace_dir}: {payload['run']['schedule'] or 'run'}, {report.run.world_size} ranks"
    if report.run.partial:
        title += " [PARTIAL]"
    tables = (
        Table(
            title=title,
            frame=rank_table(report),
            notes=tuple(f"{name}: {text}" for name, text in DEFINITIONS.items()) + ("times in ms",),
            name="ranks",
        ),
        Table(title="steps", frame=report.per_step, name="steps", shown=False),
        Table(title="realized schedule", frame=report.actions, name="schedule", shown=False),
    )
    emit(Result(payload=payload, tables=tables, warnings=report.warnings), fmt, out_dir)
