"""``tracekit report DIR``: pipeline bubbles, GPU breakdown and comm/compute overlap of a captured run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli.options import (
    analysis_config,
    analysis_options,
    explain_option,
    format_option,
    out_option,
    scheduler_option,
    wide_option,
)
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.gpu.hta_compat import HTA_VERSION, hta_breakdown
from tracekit.perrank.engine import Engine
from tracekit.present.report import hta_result, report_result


@click.command("report")
@click.argument("trace_dir", type=click.Path(path_type=Path))
@click.option(
    "--hta-compatible",
    is_flag=True,
    help=f"Per-rank idle, compute, non-compute and comm/compute overlap under HTA {HTA_VERSION}'s definitions.",
)
@analysis_options
@format_option
@explain_option
@wide_option
@out_option
@scheduler_option
def command(
    trace_dir: Path,
    hta_compatible: bool,
    fmt: Format,
    explain: bool,
    wide: bool,
    out_dir: Path | None,
    engine: Engine | None,
    **options: Any,
) -> None:
    """Per-rank bubbles, GPU busy/idle and communication overlap of the run in TRACE_DIR."""
    analysis = analyse_with_progress(trace_dir, analysis_config(options), engine=engine)
    if hta_compatible:
        emit(hta_result(analysis, hta_breakdown(analysis.run), str(trace_dir)), fmt, out_dir, explain=explain, wide=wide)
        return
    emit(report_result(analysis, str(trace_dir)), fmt, out_dir, explain=explain, wide=wide)
