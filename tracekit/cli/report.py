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
from tracekit.cli.output import Format, emit, show
from tracekit.cli.result_store import ResultStore
from tracekit.gpu import HTA_VERSION
from tracekit.perrank.engine import Engine


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
    store = ResultStore.of("report", trace_dir, {"hta_compatible": hta_compatible, **options})
    stored = None if store is None or out_dir is not None else store.read()
    if stored is not None:
        show(stored, fmt, explain=explain, wide=wide)
        return
    # The analysis and its presentation load polars: only when the result is not stored.
    from tracekit.cli.progress import analyse_with_progress
    from tracekit.gpu.hta_compat import hta_breakdown
    from tracekit.present.report import hta_result, report_result

    analysis = analyse_with_progress(trace_dir, analysis_config(options), engine=engine)
    if hta_compatible:
        result = hta_result(analysis, hta_breakdown(analysis.run), str(trace_dir))
    else:
        result = report_result(analysis, str(trace_dir))
    printed = emit(result, fmt, out_dir, explain=explain, wide=wide)
    if store is not None:
        store.write(printed)
