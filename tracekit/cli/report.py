"""``tracekit report DIR``: pipeline bubbles, GPU breakdown and comm/compute overlap of a captured run."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.analysis.report import DEFINITIONS, rank_table
from tracekit.cli.options import format_option, out_option
from tracekit.cli.output import Format, Result, Table, emit
from tracekit.cli.progress import load_run_with_progress
from tracekit.gpu.hta_compat import HTA_VERSION, hta_breakdown
from tracekit.gpu.kernel_classes import KERNEL_PATTERNS, load_patterns
from tracekit.gpu.report import (
    GPU_DEFINITIONS,
    HTA_DEFINITIONS,
    FullReport,
    breakdown_table,
    build_run_report,
    full_report_payload,
    hta_payload,
    overlap_table,
    stream_table,
    subchunk_table,
)


def _notes(definitions: dict[str, str], unit: str) -> tuple[str, ...]:
    return tuple(f"{name}: {text}" for name, text in definitions.items()) + (f"times in {unit}",)


def _report_result(trace_dir: Path, report: FullReport) -> Result:
    run = report.run
    payload = full_report_payload(report)
    title = f"{trace_dir}: {payload['run']['schedule'] or 'run'}, {run.world_size} ranks"
    if run.partial:
        title += " [PARTIAL]"
    tables: list[Table] = []
    if report.pipeline is not None:
        tables += [
            Table(
                title=title, frame=rank_table(report.pipeline), notes=_notes(DEFINITIONS, "ms"), name="ranks"
            ),
            Table(title="steps", frame=report.pipeline.per_step, name="steps", shown=False),
            Table(title="realized schedule", frame=report.pipeline.actions, name="schedule", shown=False),
        ]
    if report.gpu is not None:
        gpu = report.gpu
        tables += [
            Table(
                title=f"{title}: GPU time",
                frame=breakdown_table(gpu),
                notes=_notes(GPU_DEFINITIONS, "ms"),
                name="gpu_ranks",
            ),
            Table(title="communication hidden under compute", frame=overlap_table(gpu), name="gpu_overlap"),
            Table(title="per-stream activity", frame=stream_table(gpu), name="gpu_streams"),
        ]
        if not gpu.subchunks.is_empty():
            tables.append(
                Table(
                    title="sub-chunk schedule on the GPU (ms from the first label)",
                    frame=subchunk_table(gpu),
                    name="subchunks",
                )
            )
    return Result(payload=payload, tables=tuple(tables), warnings=report.warnings)


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
@format_option
@out_option
def command(
    trace_dir: Path, hta_compatible: bool, kernel_classes: Path | None, fmt: Format, out_dir: Path | None
) -> None:
    """Per-rank bubbles, GPU busy/idle and communication overlap of the run in TRACE_DIR."""
    run = load_run_with_progress(trace_dir)
    if hta_compatible:
        hta = hta_breakdown(run)
        table = Table(
            title=f"{trace_dir}: HTA {HTA_VERSION}-compatible temporal breakdown",
            frame=hta.frame,
            notes=_notes(HTA_DEFINITIONS, "µs"),
            name="hta",
        )
        emit(
            Result(payload=hta_payload(run, hta), tables=(table,), warnings=run.warnings + hta.warnings),
            fmt,
            out_dir,
        )
        return
    patterns = load_patterns(kernel_classes) if kernel_classes is not None else KERNEL_PATTERNS
    emit(_report_result(trace_dir, build_run_report(run, patterns)), fmt, out_dir)
