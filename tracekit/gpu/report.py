"""The report of a run with GPU traces: pipeline schedule on GPU time, plus breakdown and overlap.

``build_run_report`` decides what a run supports: schedule labels give the pipeline report
(``tracekit.analysis.report``), with each action's times taken from the GPU work it launched when
the traces hold GPU events; GPU events give the breakdown, per-stream, overlap and sub-chunk
tables. A run with neither is an error. ``full_report_payload`` is the report's JSON document,
``gpu_payload`` and ``hta_payload`` the stable GPU sections (docs/gpu.md); times in ms like the
rest of the report.

Not for: computing the figures (the other ``tracekit.gpu`` modules) or printing them (the CLI).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analysis.realized import realized_schedule
from tracekit.analysis.report import (
    RunReport,
    in_ms,
    report_of_actions,
    report_payload,
    unlabelled_payload,
)
from tracekit.gpu.analysis import GpuAnalysis, analyse_gpu, has_gpu_events
from tracekit.gpu.hta_compat import HTA_VERSION, HtaBreakdown
from tracekit.gpu.kernel_classes import KERNEL_PATTERNS, KernelPattern
from tracekit.trace.labels import Role, match_labels
from tracekit.trace.run import Run

GPU_DEFINITIONS = {
    "window": "per rank, first GPU activity start to last GPU activity end",
    "busy": "union of GPU activity, p2p (SendRecv) kernels counted only after their peer's kernel started",
    "compute/comm/memory": "union of the activity of that kernel class (docs/gpu.md table); they may overlap",
    "p2p_wait": "p2p kernel time before the peer's matching kernel started, not covered by other work: idle",
    "idle": "window - busy",
    "overlap_pct": "|comm ∩ compute| / |comm| per communication class",
    "exposed": "communication time not covered by compute",
    "schedule": "on GPU traces, an action's start/end are the first start and last end of the GPU work "
    "launched inside its label",
}

HTA_DEFINITIONS = {
    "kernel_time": "last GPU kernel end - first GPU kernel start (µs), within the steps HTA keeps",
    "idle_pct": "(kernel_time - union of kernels) / kernel_time",
    "compute_pct": "union of compute kernels (HTA's classes: not nccl*Kernel, Memcpy, Memset, *Sync) / kernel_time",
    "non_compute_pct": "100 - idle_pct - compute_pct",
    "comm_comp_overlap_pct": "|nccl kernels ∩ compute kernels| / |nccl kernels|",
}


@dataclass(frozen=True)
class FullReport:
    """What ``tracekit report`` shows: the pipeline report when labelled, the GPU figures when recorded."""

    run: Run
    pipeline: RunReport | None
    """None when no rank carries schedule labels."""
    gpu: GpuAnalysis | None
    """None when no rank recorded GPU activity."""
    warnings: tuple[str, ...]


def _has_schedule_labels(labels_run: Run) -> bool:
    labels = match_labels(labels_run.events.filter(pl.col("cat") == "user_annotation"))
    return not labels.filter(pl.col("role").is_in([Role.ACTION.value, Role.PAIR.value])).is_empty()


def build_run_report(run: Run, patterns: tuple[KernelPattern, ...] = KERNEL_PATTERNS) -> FullReport:
    """Pipeline and GPU figures of a loaded run; TracekitError when it has neither labels nor GPU events."""
    labels_run = run.restricted(("user_annotation",))
    gpu = has_gpu_events(run)
    labelled = _has_schedule_labels(labels_run)
    if not labelled and not gpu:
        realized_schedule(labels_run)  # raises the one "no schedule labels" error users know
    warnings = list(run.warnings)
    pipeline = None
    analysis = None
    if labelled and gpu:
        # One pass over each rank's GPU events gives both the GPU figures and the actions' GPU times.
        realized = realized_schedule(labels_run)
        analysis = analyse_gpu(run, patterns, realized.actions)
        assert analysis.gpu_actions is not None
        pipeline = report_of_actions(
            labels_run, analysis.gpu_actions.frame, realized.warnings + analysis.gpu_actions.warnings
        )
    elif labelled:
        realized = realized_schedule(labels_run)
        pipeline = report_of_actions(labels_run, realized.actions, realized.warnings)
    else:
        warnings.append(
            f"{run.root}: no schedule labels (tracekit:…, PP:…, Forward i/Backward i): pipeline bubbles are "
            "unknown; GPU figures only"
        )
        analysis = analyse_gpu(run, patterns)
    if pipeline is not None:
        warnings.extend(pipeline.warnings)
    if analysis is not None:
        warnings.extend(analysis.warnings)
    return FullReport(run=run, pipeline=pipeline, gpu=analysis, warnings=tuple(warnings))


def breakdown_table(analysis: GpuAnalysis) -> pl.DataFrame:
    """Per-rank GPU breakdown in ms."""
    frame = analysis.breakdown
    return frame.select(
        "rank", *in_ms([c for c in frame.columns if c.endswith("_ns")]), "busy_pct", "idle_pct"
    )


def overlap_table(analysis: GpuAnalysis) -> pl.DataFrame:
    """Per-rank, per-class communication overlap in ms."""
    return analysis.overlap.select(
        "rank", "comm_class", *in_ms(["comm_ns", "overlap_ns", "exposed_ns"]), "overlap_pct"
    )


def stream_table(analysis: GpuAnalysis) -> pl.DataFrame:
    """Per-stream activity in ms."""
    frame = analysis.streams
    return frame.select(
        "rank",
        "device",
        "stream",
        "activities",
        *in_ms([c for c in frame.columns if c.endswith("_ns")]),
        "busy_pct",
    )


def subchunk_table(analysis: GpuAnalysis) -> pl.DataFrame:
    """The sub-chunk schedule in ms, times relative to the rank's first sub-chunk label."""
    frame = analysis.subchunks
    origin = pl.col("cpu_start_ns").min().over("rank")
    relative = in_ms(["cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns"], origin)
    return frame.select(
        "rank", "index", "op", "kind", *relative, *in_ms(["gpu_busy_ns", "compute_ns", "comm_ns"]), "kernels"
    )


def gpu_payload(analysis: GpuAnalysis) -> dict[str, Any]:
    """The ``gpu`` section of the report's JSON document."""
    return {
        "definitions": GPU_DEFINITIONS,
        "ranks": breakdown_table(analysis).to_dicts(),
        "overlap": overlap_table(analysis).to_dicts(),
        "streams": stream_table(analysis).to_dicts(),
        "subchunks": subchunk_table(analysis).to_dicts(),
        "unmatched_p2p_kernels": analysis.unmatched_p2p,
    }


def full_report_payload(report: FullReport) -> dict[str, Any]:
    """The JSON document of ``tracekit report``: the pipeline report's (docs/report.md), its ``gpu`` section."""
    if report.pipeline is not None:
        payload = report_payload(report.pipeline)
    else:
        payload = unlabelled_payload(report.run)
    payload["gpu"] = gpu_payload(report.gpu) if report.gpu is not None else None
    payload["warnings"] = list(report.warnings)
    return payload


def hta_payload(run: Run, hta: HtaBreakdown) -> dict[str, Any]:
    """The JSON document of ``tracekit report --hta-compatible``."""
    return {
        "format_version": 1,
        "definitions_of": f"HolisticTraceAnalysis {HTA_VERSION}",
        "definitions": HTA_DEFINITIONS,
        "time_unit": "us",
        "root": str(run.root),
        "steps_filtered": hta.steps_filtered,
        "ranks": hta.frame.to_dicts(),
        "warnings": list(run.warnings + hta.warnings),
    }
