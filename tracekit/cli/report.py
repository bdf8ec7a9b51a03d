"""``tracekit report DIR``: pipeline bubbles, GPU breakdown and comm/compute overlap of a captured run."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.analysis.pipelines import PipelineLayout
from tracekit.cli.options import explain_option, wide_option, format_option, out_option, pipelines_option, scheduler_option
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.gpu.hta_compat import HTA_VERSION, hta_breakdown
from tracekit.gpu.kernel_classes import KERNEL_PATTERNS, load_patterns
from tracekit.perrank.engine import Engine
from tracekit.present.report import hta_result, report_result
from tracekit.run_analysis import AnalysisConfig


@click.command("report")
@click.argument("trace_dir", type=click.Path(path_type=Path))
@click.option(
    "--hta-compatible",
    is_flag=True,
    help=f"Per-rank idle, compute, non-compute and comm/compute overlap under HTA {HTA_VERSION}'s definitions.",
)
@click.option(
    "--kernel-classes",
    "kernel_classes",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML or YAML file of extra kernel-class patterns, tried before the built-in table (docs/gpu.md).",
)
@pipelines_option
@format_option
@explain_option
@wide_option
@out_option
@scheduler_option
def command(
    trace_dir: Path,
    hta_compatible: bool,
    kernel_classes: Path | None,
    pipelines: PipelineLayout | None,
    fmt: Format,
    explain: bool,
    wide: bool,
    out_dir: Path | None,
    engine: Engine | None,
) -> None:
    """Per-rank bubbles, GPU busy/idle and communication overlap of the run in TRACE_DIR."""
    patterns = load_patterns(kernel_classes) if kernel_classes is not None else KERNEL_PATTERNS
    config = AnalysisConfig(kernel_patterns=patterns, pipelines=pipelines)
    analysis = analyse_with_progress(trace_dir, config, engine=engine)
    if hta_compatible:
        emit(hta_result(analysis, hta_breakdown(analysis.run), str(trace_dir)), fmt, out_dir, explain=explain, wide=wide)
        return
    emit(report_result(analysis, str(trace_dir)), fmt, out_dir, explain=explain, wide=wide)
