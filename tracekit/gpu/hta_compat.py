"""HTA 0.5.0's temporal breakdown and comm/compute overlap, re-implemented on the event table.

Holistic Trace Analysis (HTA, facebookresearch/HolisticTraceAnalysis, 0.5.0 on PyPI) is the
reference many users compare with. Its definitions, per rank (docs/gpu.md, "HTA-compatible"):
- **GPU work**: every event carrying ``args.stream`` (kernels, copies, memsets).
- **steps kept**: when the run's traces name two or more distinct ``ProfilerStep#n``, only work
  launched (CPU correlation event) before the rank's last ``ProfilerStep`` starts; else everything.
- **times**: whole µs; a fractional start is rounded up and a fractional end down.
- **classes** (``HTA_CLASSES``, first match wins): communication ``^nccl.*Kernel``; memory
  ``^Memcpy|^Memset|^dma``; compute: neither, nor a name holding ``Memcpy`` or ``Sync``; the rest
  is "other" (non-compute). DeepEP kernels are therefore compute here.
- **kernel time**: last GPU work end - first GPU work start; **idle** = kernel time - union of work;
  **compute** = union of compute work; **non-compute** = kernel time - compute - idle.
- **comm/compute overlap** = |union(communication) ∩ union(compute)| / |union(communication)|.

Not for: tracekit's own, pipeline-aware figures (``tracekit.gpu.breakdown``, ``tracekit.gpu.overlap``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from tracekit.analysis.intervals import covered_ns, merge_spans, overlap_ns
from tracekit.errors import TracekitError
from tracekit.gpu import HTA_VERSION as HTA_VERSION
from tracekit.trace.run import Run

HTA_CLASSES: tuple[tuple[str, str], ...] = (
    ("communication", r"^nccl.*Kernel"),
    ("memory", r"^(Memcpy|Memset|dma)"),
    ("other", r"^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)"),
)
"""HTA 0.5.0's kernel types as (class, regex matched at the name's start); unmatched: compute."""

PROFILER_STEP = "ProfilerStep"

HTA_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "idle_time_us": pl.Int64(),
    "compute_time_us": pl.Int64(),
    "non_compute_time_us": pl.Int64(),
    "kernel_time_us": pl.Int64(),
    "idle_pct": pl.Float64(),
    "compute_pct": pl.Float64(),
    "non_compute_pct": pl.Float64(),
    "comm_comp_overlap_pct": pl.Float64(),
}
"""Per rank, HTA's columns (µs; percent of kernel time). ``comm_comp_overlap_pct`` is null on a
rank with no communication kernel (HTA divides by zero there)."""


@dataclass(frozen=True)
class HtaBreakdown:
    """HTA-compatible figures of a run and how they were scoped."""

    frame: pl.DataFrame
    """Frame in ``HTA_SCHEMA``."""
    steps_filtered: bool
    """True when only work launched before each rank's last ProfilerStep counts."""
    warnings: tuple[str, ...]


def hta_class(name: pl.Expr) -> pl.Expr:
    """HTA 0.5.0's kernel type of each name: communication, memory, other or compute."""
    result: pl.Expr = pl.lit("compute")
    for label, pattern in reversed(HTA_CLASSES):
        result = pl.when(name.str.contains(pattern)).then(pl.lit(label)).otherwise(result)
    return result


def _step_names(run: Run) -> list[str]:
    names: set[str] = set()
    for rank in run.ranks:
        found = run.rank_events(rank).filter(pl.col("name").str.contains(PROFILER_STEP, literal=True))
        names.update(found.select(pl.col("name").unique()).collect()["name"].to_list())
    return sorted(names)


def _work(events: pl.DataFrame, base_ns: int, filtered: bool, rank: int) -> pl.DataFrame:
    """The rank's GPU work in HTA's whole µs, restricted to HTA's kept steps when ``filtered``."""
    work = events.filter(pl.col("stream").is_not_null())
    if filtered:
        cpu = events.filter(pl.col("stream").is_null() | pl.col("correlation").is_null())
        last_step = cpu.filter(pl.col("name").str.contains(PROFILER_STEP, literal=True))["start_ns"].max()
        if last_step is None:
            raise TracekitError(
                f"rank {rank} has no ProfilerStep while other ranks do: HTA's step filter is undefined for it"
            )
        launched = cpu.filter(pl.col("start_ns") < last_step)["correlation"].drop_nulls().unique()
        work = work.filter(pl.col("correlation").is_in(launched.implode()))  # a null id is never kept
    # HTA rounds fractional µs inward: start up, end down (hta/common/trace_parser.py round_down_time_stamps).
    relative = pl.col("start_ns") - base_ns
    spans = work.select(
        (-((-relative) // 1000)).alias("start_ns"),
        ((relative + pl.col("dur_ns")) // 1000).alias("end_ns"),
        "name",
    )
    # The regexes run once per distinct name (a few hundred), not once per kernel (tens of thousands).
    classes = spans.select(pl.col("name").unique()).with_columns(hta_class(pl.col("name")).alias("hta_class"))
    return spans.join(classes, on="name", how="left", maintain_order="left").drop("name")


def _rank_figures(rank: int, work: pl.DataFrame) -> dict[str, float | int | None]:
    if work.is_empty():
        raise TracekitError(f"rank {rank} has no GPU kernels in HTA's kept steps: nothing to break down")
    merged = merge_spans(work, [])
    kernel_time = int(merged["end_ns"].max() - merged["start_ns"].min())
    busy = int((merged["end_ns"] - merged["start_ns"]).sum())
    compute = work.filter(pl.col("hta_class") == "compute")
    comm = work.filter(pl.col("hta_class") == "communication")
    compute_time = int(covered_ns(compute, [])["covered_ns"].sum()) if not compute.is_empty() else 0
    comm_time = int(covered_ns(comm, [])["covered_ns"].sum()) if not comm.is_empty() else 0
    hidden = int(overlap_ns(comm, compute, [])["overlap_ns"].sum()) if comm_time and compute_time else 0
    idle = kernel_time - busy
    non_compute = kernel_time - compute_time - idle
    return {
        "rank": rank,
        "idle_time_us": idle,
        "compute_time_us": compute_time,
        "non_compute_time_us": non_compute,
        "kernel_time_us": kernel_time,
        "idle_pct": 100 * idle / kernel_time if kernel_time else None,
        "compute_pct": 100 * compute_time / kernel_time if kernel_time else None,
        "non_compute_pct": 100 * non_compute / kernel_time if kernel_time else None,
        "comm_comp_overlap_pct": 100 * hidden / comm_time if comm_time else None,
    }


def hta_breakdown(run: Run) -> HtaBreakdown:
    """HTA 0.5.0's temporal breakdown and comm/compute overlap of every rank, one rank in memory at a time."""
    steps = _step_names(run)
    filtered = len(steps) >= 2
    warnings: list[str] = []
    if not steps:
        warnings.append(
            f"{run.root}: no ProfilerStep in any trace: HTA-compatible figures cover the whole trace"
        )
    elif not filtered:
        warnings.append(
            f"{run.root}: one ProfilerStep name ({steps[0]}) in the run: HTA keeps every kernel, including "
            "work outside the step"
        )
    rows = []
    for trace in run.traces:
        columns = (
            run.rank_events(trace.rank)
            .select("name", "stream", "correlation", "start_ns", "dur_ns")
            .collect()
        )
        rows.append(_rank_figures(trace.rank, _work(columns, trace.base_ns, filtered, trace.rank)))
    frame = pl.DataFrame(rows, schema=HTA_SCHEMA, orient="row") if rows else pl.DataFrame(schema=HTA_SCHEMA)
    return HtaBreakdown(frame=frame, steps_filtered=filtered, warnings=tuple(warnings))


assert all(re.compile(pattern) for _, pattern in HTA_CLASSES)
