"""``tracekit report``'s output: the stable JSON document (docs/report.md, docs/gpu.md) and its tables.

Times are milliseconds; schedule times relative to the run's first action.

Not for: computing the figures (``tracekit.run_analysis`` and the modules it names) or printing.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.gpu.analysis import GpuAnalysis
from tracekit.gpu.hta_compat import HTA_VERSION, HtaBreakdown
from tracekit.present.common import facts_json, in_ms, notes_of
from tracekit.present.memory import absent_note, memory_payload, memory_tables
from tracekit.present.result import Result, Table
from tracekit.run_analysis import RunAnalysis
from tracekit.schedule.action import KIND_CODES

REPORT_FORMAT_VERSION = 1

DEFINITIONS = {
    "window": "per step, from the earliest action start on any rank to the latest action end on any rank "
    "(covers pipeline fill and drain); a rank's window is the sum over its steps",
    "busy": "union of the rank's compute-action spans (F, B, I, W) inside the window",
    "bubble_fraction": "(window - busy) / window",
    "replica": "the rank's data-parallel replica: the index of its pipeline group (run.json or --pipelines)",
    "span": "per replica and step, its ranks' first action start to last action end; the step window is "
    "over all replicas",
    "clock": "gpu: action times are the first start and last end of the GPU work launched inside each "
    "label; cpu: the labels' own spans",
}

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


def rank_table(analysis: RunAnalysis) -> pl.DataFrame:
    """The per-rank table people read: milliseconds and counts."""
    return analysis.utilization.per_rank.select(
        "rank",
        "replica",
        "steps",
        *in_ms(["window_ns", "busy_ns", "bubble_ns"]),
        "bubble_fraction",
        *KIND_CODES,
    )


def replica_table(analysis: RunAnalysis) -> pl.DataFrame:
    """Per data-parallel replica: its mean span per step beside its ranks' busy and bubble time, ms."""
    return analysis.utilization.per_replica.select(
        "replica",
        "ranks",
        "steps",
        (pl.col("span_ns") / pl.col("steps") / 1e6).alias("span_per_step"),
        *in_ms(["window_ns", "busy_ns", "bubble_ns"]),
        "bubble_fraction",
    )


def step_table(analysis: RunAnalysis) -> pl.DataFrame:
    """Per (rank, step) window, busy and bubble in ms."""
    return analysis.utilization.per_step.select(
        "rank", "replica", "step", *in_ms(["window_ns", "busy_ns", "bubble_ns"]), "bubble_fraction"
    )


def breakdown_table(gpu: GpuAnalysis) -> pl.DataFrame:
    """Per-rank GPU breakdown in ms."""
    frame = gpu.breakdown
    return frame.select(
        "rank", *in_ms([c for c in frame.columns if c.endswith("_ns")]), "busy_pct", "idle_pct"
    )


def overlap_table(gpu: GpuAnalysis) -> pl.DataFrame:
    """Per-rank, per-class communication overlap in ms."""
    return gpu.overlap.select(
        "rank", "comm_class", *in_ms(["comm_ns", "overlap_ns", "exposed_ns"]), "overlap_pct"
    )


def stream_table(gpu: GpuAnalysis) -> pl.DataFrame:
    """Per-stream activity in ms."""
    frame = gpu.streams
    return frame.select(
        "rank",
        "device",
        "stream",
        "activities",
        *in_ms([c for c in frame.columns if c.endswith("_ns")]),
        "busy_pct",
    )


def subchunk_table(gpu: GpuAnalysis) -> pl.DataFrame:
    """The sub-chunk schedule in ms, times relative to the rank's first sub-chunk label."""
    frame = gpu.subchunks
    origin = pl.col("cpu_start_ns").min().over("rank")
    relative = in_ms(["cpu_start_ns", "cpu_end_ns", "gpu_start_ns", "gpu_end_ns"], origin)
    return frame.select(
        "rank", "index", "op", "kind", *relative, *in_ms(["gpu_busy_ns", "compute_ns", "comm_ns"]), "kernels"
    )


def gpu_payload(gpu: GpuAnalysis) -> dict[str, Any]:
    """The ``gpu`` section of the report's JSON document (docs/gpu.md)."""
    return {
        "definitions": GPU_DEFINITIONS,
        "ranks": breakdown_table(gpu).to_dicts(),
        "overlap": overlap_table(gpu).to_dicts(),
        "streams": stream_table(gpu).to_dicts(),
        "subchunks": subchunk_table(gpu).to_dicts(),
        "unmatched_p2p_kernels": gpu.unmatched_p2p,
    }


def report_warnings(analysis: RunAnalysis) -> tuple[str, ...]:
    """What the report must say it could not do, in one deterministic order, each once."""
    warnings = list(analysis.run_warnings)
    if analysis.has_schedule_labels:
        warnings += analysis.realized.warnings
    else:
        warnings.append(
            f"{analysis.run.root}: no schedule labels (tracekit:…, PP:…, Forward i/Backward i): pipeline bubbles "
            "are unknown; GPU figures only"
        )
    if analysis.gpu is not None:
        warnings += analysis.gpu.warnings
    return tuple(dict.fromkeys(warnings))


def report_payload(analysis: RunAnalysis) -> dict[str, Any]:
    """The JSON document of ``tracekit report`` (docs/report.md), with its ``gpu`` section."""
    head = {
        "format_version": REPORT_FORMAT_VERSION,
        "time_unit": "ms",
        "run": facts_json(analysis.facts),
        "definitions": DEFINITIONS,
    }
    if analysis.has_schedule_labels:
        actions = analysis.actions
        origin = actions["start_ns"].min()
        ranks = [
            {
                "rank": row["rank"],
                "replica": row["replica"],
                "bubble_fraction": row["bubble_fraction"],
                "busy": row["busy"],
                "window": row["window"],
                "bubble": row["bubble"],
                "steps": row["steps"],
                "actions": {code: row[code] for code in KIND_CODES},
            }
            for row in rank_table(analysis).iter_rows(named=True)
        ]
        schedule = actions.select(
            "rank",
            "replica",
            "stage",
            "kind",
            "microbatch",
            "step",
            *in_ms(["start_ns", "end_ns"], origin),
            "overlapped",
        ).to_dicts()
        body = {
            "clock": analysis.clock.value,
            "ranks": ranks,
            "replicas": replica_table(analysis).to_dicts(),
            "pipeline_groups": {
                "source": analysis.pipelines.source,
                "groups": [list(group) for group in analysis.pipelines.groups],
            },
            "steps": step_table(analysis).to_dicts(),
            "schedule": schedule,
        }
    else:
        body = {
            "clock": None,
            "ranks": [],
            "replicas": [],
            "pipeline_groups": None,
            "steps": [],
            "schedule": [],
        }
    gpu = analysis.gpu
    return {
        **head,
        **body,
        "gpu": gpu_payload(gpu) if gpu is not None else None,
        "memory": memory_payload(analysis) if analysis.has_schedule_labels else None,
        "warnings": list(report_warnings(analysis)),
    }


RANK_HEADERS = {
    "window": "window ms",
    "busy": "busy ms",
    "bubble": "bubble ms",
    "bubble_fraction": "bubble fraction",
}


def headline(payload: dict[str, Any], name: str) -> tuple[str, ...]:
    """The answer before the table: the step, how much of it the ranks sit idle, and what to run next."""
    ranks = [row for row in payload["ranks"] if row["steps"]]
    if not ranks:
        return ()
    step_ms = max(row["window"] / row["steps"] for row in ranks)
    idlest = max(ranks, key=lambda row: row["bubble_fraction"])
    busiest = min(ranks, key=lambda row: row["bubble_fraction"])
    mean = sum(row["bubble_fraction"] for row in ranks) / len(ranks)
    first = (
        f"A step takes {step_ms:.0f} ms; the ranks sit idle (the pipeline bubble) {mean:.0%} of it on average, "
        f"from {busiest['bubble_fraction']:.0%} on rank {busiest['rank']} to {idlest['bubble_fraction']:.0%} on "
        f"rank {idlest['rank']}."
    )
    if len(ranks) < 2:
        return (first,)
    return (
        first,
        f"The busiest rank, rank {busiest['rank']}, sets the pace; `tracekit stragglers {name}` says whether it "
        f"is a straggler and what it costs.",
    )


def report_result(analysis: RunAnalysis, name: str) -> Result:
    """Payload and tables of ``tracekit report`` for the run called ``name`` (the path the user gave)."""
    analysis.check_analysable()
    payload = report_payload(analysis)
    run = analysis.run
    ranks = f"{run.world_size} rank{'s' if run.world_size != 1 else ''}"
    title = f"{name}: {payload['run']['schedule'] or 'run'}, {ranks}"
    if run.partial:
        title += " [PARTIAL]"
    tables: list[Table] = []
    if analysis.has_schedule_labels:
        clock = f"times in ms on the {analysis.clock.value.upper()} clock"
        ranks = rank_table(analysis)
        narrow = tuple(c for c in ranks.columns if c != "replica" or analysis.pipelines.replicas > 1)
        tables += [
            Table(
                title=title,
                frame=ranks,
                notes=(clock, *absent_note(analysis)),
                name="ranks",
                columns=narrow,
                headers=RANK_HEADERS,
            ),
            *memory_tables(analysis),
            Table(
                title=f"{analysis.pipelines.replicas} data-parallel replicas (pipeline groups from "
                f"{analysis.pipelines.source}), times in ms",
                frame=replica_table(analysis),
                name="replicas",
                shown=analysis.pipelines.replicas > 1,
            ),
            Table(title="steps", frame=analysis.utilization.per_step, name="steps", shown=False),
            Table(title="realized schedule", frame=analysis.actions, name="schedule", shown=False),
        ]
    gpu = analysis.gpu
    if gpu is not None:
        tables += [
            Table(title=f"{title}: GPU time", frame=breakdown_table(gpu), notes=("times in ms",), name="gpu_ranks"),
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
    definitions = notes_of(DEFINITIONS) if analysis.has_schedule_labels else ()
    if gpu is not None:
        definitions += notes_of({f"GPU {key}": text for key, text in GPU_DEFINITIONS.items()})
    return Result(
        payload=payload,
        tables=tuple(tables),
        warnings=tuple(payload["warnings"]),
        headline=headline(payload, name),
        definitions=definitions,
    )


def hta_result(analysis: RunAnalysis, hta: HtaBreakdown, name: str) -> Result:
    """Payload and table of ``tracekit report --hta-compatible``."""
    run = analysis.run
    payload = {
        "format_version": 1,
        "definitions_of": f"HolisticTraceAnalysis {HTA_VERSION}",
        "definitions": HTA_DEFINITIONS,
        "time_unit": "us",
        "root": str(run.root),
        "steps_filtered": hta.steps_filtered,
        "ranks": hta.frame.to_dicts(),
        "warnings": list(run.warnings + hta.warnings),
    }
    table = Table(
        title=f"{name}: HTA {HTA_VERSION}-compatible temporal breakdown",
        frame=hta.frame,
        notes=("times in µs",),
        name="hta",
    )
    return Result(
        payload=payload,
        tables=(table,),
        warnings=run.warnings + hta.warnings,
        definitions=notes_of(HTA_DEFINITIONS),
    )
