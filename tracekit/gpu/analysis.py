"""The GPU analysis of a whole run, one rank in memory at a time.

``analyse_gpu`` reads each rank's cached event table lazily, twice: a first pass collects the p2p
kernels of every rank (a small table) to split their waiting from their transfer across ranks; the
second builds each rank's timeline and reduces it to breakdown, per-stream, overlap and sub-chunk
rows (and, when given the realized actions, the GPU extent of each action's work) before the next
rank is read. Peak memory is therefore one rank's GPU events plus the (small) result rows,
whatever the number of ranks.

Not for: the definitions themselves (``tracekit.gpu.breakdown``, ``overlap``, ``schedule``).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.errors import TracekitError
from tracekit.gpu.breakdown import gpu_breakdown, p2p_waits, stream_activity
from tracekit.gpu.kernel_classes import GPU_CATEGORIES, KERNEL_PATTERNS, P2P, KernelPattern, classify
from tracekit.gpu.overlap import comm_overlap
from tracekit.gpu.schedule import project_actions, subchunk_schedule
from tracekit.gpu.timeline import LAUNCH_CATEGORIES, STREAM_KEY_EXPRS, gpu_activities, gpu_timeline
from tracekit.trace.run import Run

_NEEDED = (*GPU_CATEGORIES, *LAUNCH_CATEGORIES, "user_annotation")
_STREAM_KEY = ["rank", "device", "stream", "start_ns", "end_ns"]


@dataclass(frozen=True)
class GpuAnalysis:
    """Every GPU figure of a run (frames in the schemas of the modules named)."""

    breakdown: pl.DataFrame
    """``tracekit.gpu.breakdown.BREAKDOWN_SCHEMA``."""
    streams: pl.DataFrame
    """``tracekit.gpu.breakdown.STREAM_SCHEMA``."""
    overlap: pl.DataFrame
    """``tracekit.gpu.overlap.OVERLAP_SCHEMA``."""
    subchunks: pl.DataFrame
    """``tracekit.gpu.schedule.SUBCHUNK_SCHEMA``."""
    action_projection: pl.DataFrame | None
    """The realized actions given to ``analyse_gpu`` with the GPU extent of their work
    (``tracekit.gpu.schedule.ACTION_PROJECTION_SCHEMA``); None when none were given."""
    unmatched_p2p: int
    """p2p kernels with no peer among the loaded ranks: their wait is unknown, counted as transfer."""
    warnings: tuple[str, ...]


def has_gpu_events(run: Run) -> bool:
    """True when any rank's trace holds GPU work (kernels, copies, memsets)."""
    return any(
        run.rank_events(rank).filter(pl.col("cat").is_in(GPU_CATEGORIES)).select(pl.len()).collect().item()
        > 0
        for rank in run.ranks
    )


def _rank_events(run: Run, rank: int) -> pl.DataFrame:
    return run.rank_events(rank).filter(pl.col("cat").is_in(_NEEDED)).collect()


def analyse_gpu(
    run: Run, patterns: tuple[KernelPattern, ...] = KERNEL_PATTERNS, actions: pl.DataFrame | None = None
) -> GpuAnalysis:
    """GPU breakdown, per-stream activity, overlap and sub-chunk schedule of ``run``; TracekitError without GPU work.

    With realized ``actions`` (``REALIZED_SCHEMA``), also the GPU extent of their work, from the same timelines.
    """
    # First pass: only the p2p kernels of every rank (classified by distinct name, no launch join).
    p2p = []
    gpu_work = False
    for rank in run.ranks:
        gpu = gpu_activities(run.rank_events(rank)).select(*STREAM_KEY_EXPRS, "cat", "name").collect()
        gpu_work = gpu_work or not gpu.is_empty()
        p2p.append(classify(gpu, patterns).filter(pl.col("comm_class") == P2P).drop("name"))
    if not gpu_work:
        raise TracekitError(
            "no GPU events (kernel, gpu_memcpy, gpu_memset) in any rank's trace: record with "
            "ProfilerActivity.CUDA to measure the GPU",
            run.root,
        )
    waits = p2p_waits(pl.concat(p2p)).select(*_STREAM_KEY, "wait_ns", "peer_rank")
    unmatched = waits.filter(pl.col("wait_ns").is_null()).height

    parts: dict[str, list[pl.DataFrame]] = {"breakdown": [], "streams": [], "overlap": [], "subchunks": []}
    warnings: list[str] = []
    projected: list[pl.DataFrame] = []
    for rank in run.ranks:
        events = _rank_events(run, rank)
        timeline = gpu_timeline(events, patterns)
        if actions is not None:
            projected.append(project_actions(actions.filter(pl.col("rank") == rank), timeline.activities))
        warnings.extend(timeline.warnings)
        if timeline.activities.is_empty():
            warnings.append(f"{run.root}: rank {rank} has no GPU events: it is left out of the GPU figures")
            continue
        waited = timeline.activities.join(waits, on=_STREAM_KEY, how="left").with_columns(
            pl.when(pl.col("comm_class") == P2P)
            .then(pl.col("wait_ns"))
            .otherwise(pl.col("wait_ns").fill_null(0))
        )
        parts["breakdown"].append(gpu_breakdown(waited))
        parts["streams"].append(stream_activity(waited))
        parts["overlap"].append(comm_overlap(waited))
        schedule = subchunk_schedule(events, timeline.activities)
        parts["subchunks"].append(schedule.frame)
        warnings.extend(f"{run.root}: rank {rank}: {warning}" for warning in schedule.warnings)
        del events, timeline, waited
    if unmatched:
        warnings.append(
            f"{run.root}: {unmatched} p2p (SendRecv) kernels have no peer kernel in the loaded ranks: their "
            "waiting cannot be told from transfer, so all their time counts as communication"
        )
    projection = pl.concat(projected).sort("rank", "start_ns") if actions is not None else None
    return GpuAnalysis(
        breakdown=pl.concat(parts["breakdown"]),
        streams=pl.concat(parts["streams"]),
        overlap=pl.concat(parts["overlap"]),
        subchunks=pl.concat(parts["subchunks"]),
        action_projection=projection,
        unmatched_p2p=unmatched,
        warnings=tuple(warnings),
    )
