"""The GPU analysis of a whole run, split into what one rank gives alone and what needs every rank.

Per rank, from its own events only (``rank_timeline``): the classified GPU timeline, its p2p
kernels, the sub-chunk schedule, and (given the rank's labelled actions) the GPU extent of each
action's work. Across ranks (``p2p_waits`` over every rank's p2p kernels, one pass): how long
each p2p kernel waited for its peer. Per rank again, given its waits (``rank_figures``):
breakdown, per-stream activity and overlap. ``combine_gpu`` puts the ranks' parts together.

The per-rank steps are what ``tracekit.perrank`` runs as tasks (worker processes, or a Dask
cluster) beside the parse and caches; ``analyse_gpu`` runs the same steps here, one rank in memory
at a time, reading each rank's events twice rather than keeping every timeline.

Not for: the definitions themselves (``tracekit.gpu.breakdown``, ``overlap``, ``schedule``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from tracekit.analysis.pipelines import ONE_PIPELINE, PipelineGroups, with_replicas
from tracekit.analysis.realized import REALIZED_SCHEMA
from tracekit.errors import TracekitError
from tracekit.gpu.breakdown import gpu_breakdown, p2p_waits, stream_activity
from tracekit.gpu.kernel_classes import GPU_CATEGORIES, KERNEL_PATTERNS, P2P, KernelPattern
from tracekit.gpu.overlap import comm_overlap
from tracekit.gpu.schedule import ACTION_PROJECTION_SCHEMA, project_actions, subchunk_schedule
from tracekit.gpu.timeline import GPU_SCHEMA, LAUNCH_CATEGORIES, classified_activities, gpu_timeline
from tracekit.trace.run import Run

NEEDED_CATEGORIES = (*GPU_CATEGORIES, *LAUNCH_CATEGORIES, "user_annotation")
"""The event categories the GPU analysis of a rank reads."""
WAIT_KEY = ["rank", "device", "stream", "start_ns", "end_ns"]
"""The key joining a rank's GPU activities to their p2p waits."""
P2P_SCHEMA: dict[str, pl.DataType] = {
    name: GPU_SCHEMA[name] for name in (*WAIT_KEY, "cat", "kernel_class", "comm_class")
}
"""A rank's p2p kernels as ``p2p_waits`` reads them (``GPU_SCHEMA`` columns)."""


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


@dataclass(frozen=True)
class RankTimeline:
    """What one rank's GPU timeline gives before the run's p2p kernels are matched (``rank_timeline``)."""

    rank: int
    has_gpu: bool
    """True when the rank's trace holds GPU work at all."""
    p2p: pl.DataFrame
    """The rank's p2p kernels in trace order (``P2P_SCHEMA``): this rank's share of ``p2p_waits``' input."""
    subchunks: pl.DataFrame | None
    """``SUBCHUNK_SCHEMA`` rows; None when the rank has no GPU activities (it is left out)."""
    projection: pl.DataFrame
    """The rank's labelled actions with the GPU extent of their work (``project_actions``)."""
    warnings: tuple[str, ...]
    """What the timeline found odd (``tracekit.gpu.timeline``)."""
    subchunk_warnings: tuple[str, ...]
    """What the sub-chunk projection found odd."""


@dataclass(frozen=True)
class RankFigures:
    """One rank's GPU figures once its p2p waits are known (``rank_figures``)."""

    breakdown: pl.DataFrame
    streams: pl.DataFrame
    overlap: pl.DataFrame


def rank_timeline(
    events: pl.DataFrame, rank: int, patterns: tuple[KernelPattern, ...], actions: pl.DataFrame
) -> tuple[RankTimeline, pl.DataFrame]:
    """The per-rank part of the GPU analysis of ``events`` (one rank's rows), and its GPU activities (``GPU_SCHEMA``).

    ``actions`` are the rank's labelled actions (``REALIZED_SCHEMA``, possibly empty).
    """
    classified = classified_activities(events, patterns)
    p2p = classified.filter(pl.col("comm_class") == P2P).drop("name")
    timeline = gpu_timeline(events, patterns, classified)
    subchunks, subchunk_warnings = None, ()
    if not timeline.activities.is_empty():
        schedule = subchunk_schedule(events, timeline.activities)
        subchunks, subchunk_warnings = schedule.frame, schedule.warnings
    summary = RankTimeline(
        rank=rank,
        has_gpu=not classified.is_empty(),
        p2p=p2p.select(list(P2P_SCHEMA)).cast(P2P_SCHEMA),  # type: ignore[arg-type]
        subchunks=subchunks,
        projection=project_actions(actions, timeline.activities),
        warnings=timeline.warnings,
        subchunk_warnings=tuple(subchunk_warnings),
    )
    return summary, timeline.activities


def _rank_warnings(timeline: RankTimeline, root: object) -> list[str]:
    """One rank's GPU warnings as the run's analysis words them."""
    if timeline.subchunks is None:
        left_out = f"{root}: rank {timeline.rank} has no GPU events: it is left out of the GPU figures"
        return [*timeline.warnings, left_out]
    return [*timeline.warnings, *(f"{root}: rank {timeline.rank}: {w}" for w in timeline.subchunk_warnings)]


def run_waits(timelines: list[RankTimeline]) -> pl.DataFrame:
    """Every rank's p2p kernels with their wait and peer (``WAIT_KEY``, ``wait_ns``, ``peer_rank``)."""
    return p2p_waits(pl.concat([timeline.p2p for timeline in timelines])).select(
        *WAIT_KEY, "wait_ns", "peer_rank"
    )


def rank_figures(activities: pl.DataFrame, waits: pl.DataFrame) -> RankFigures:
    """Breakdown, per-stream activity and overlap of one rank's GPU activities, given its rows of ``run_waits``."""
    waited = activities.join(waits, on=WAIT_KEY, how="left").with_columns(
        pl.when(pl.col("comm_class") == P2P).then(pl.col("wait_ns")).otherwise(pl.col("wait_ns").fill_null(0))
    )
    return RankFigures(
        breakdown=gpu_breakdown(waited), streams=stream_activity(waited), overlap=comm_overlap(waited)
    )


def no_gpu_error(root: object) -> TracekitError:
    """The error for a run whose traces hold no GPU work."""
    return TracekitError(
        "no GPU events (kernel, gpu_memcpy, gpu_memset) in any rank's trace: record with "
        "ProfilerActivity.CUDA to measure the GPU",
        root,  # type: ignore[arg-type]
    )


def combine_gpu(
    timelines: list[RankTimeline],
    figures: dict[int, RankFigures],
    waits: pl.DataFrame,
    with_actions: bool,
    root: object,
    groups: PipelineGroups = ONE_PIPELINE,
) -> GpuAnalysis:
    """The run's ``GpuAnalysis`` from every rank's timeline (rank order), the figures of those with GPU work, and ``waits``.

    ``groups`` gives the projected actions their replica when the ranks' projections lack it.
    """
    unmatched = waits.filter(pl.col("wait_ns").is_null()).height
    warnings = [warning for timeline in timelines for warning in _rank_warnings(timeline, root)]
    if unmatched:
        warnings.append(
            f"{root}: {unmatched} p2p (SendRecv) kernels have no peer kernel in the loaded ranks: their "
            "waiting cannot be told from transfer, so all their time counts as communication"
        )
    kept = [timeline.rank for timeline in timelines if timeline.subchunks is not None]
    projection = None
    if with_actions:
        projection = pl.concat([timeline.projection for timeline in timelines])
        if "replica" not in projection.columns:
            projection = with_replicas(projection, groups)
        projection = projection.select(list(ACTION_PROJECTION_SCHEMA)).sort("rank", "start_ns")
    return GpuAnalysis(
        breakdown=pl.concat([figures[rank].breakdown for rank in kept]),
        streams=pl.concat([figures[rank].streams for rank in kept]),
        overlap=pl.concat([figures[rank].overlap for rank in kept]),
        subchunks=pl.concat([t.subchunks for t in timelines if t.subchunks is not None]),
        action_projection=projection,
        unmatched_p2p=unmatched,
        warnings=tuple(warnings),
    )


def _rank_events(run: Run, rank: int) -> pl.DataFrame:
    return run.rank_events(rank).filter(pl.col("cat").is_in(NEEDED_CATEGORIES)).collect()


def analyse_gpu(
    run: Run, patterns: tuple[KernelPattern, ...] = KERNEL_PATTERNS, actions: pl.DataFrame | None = None
) -> GpuAnalysis:
    """GPU breakdown, per-stream activity, overlap and sub-chunk schedule of ``run``; TracekitError without GPU work.

    With realized ``actions`` (``REALIZED_SCHEMA``), also the GPU extent of their work, from the same timelines.
    """
    given = actions if actions is not None else pl.DataFrame(schema=REALIZED_SCHEMA)
    actions_of = by_rank(given)
    timelines = [
        rank_timeline(_rank_events(run, rank), rank, patterns, actions_of(rank))[0] for rank in run.ranks
    ]
    if not any(timeline.has_gpu for timeline in timelines):
        raise no_gpu_error(run.root)
    waits = run_waits(timelines)
    waits_of = by_rank(waits)
    figures = {}
    for timeline in timelines:
        if timeline.subchunks is None:
            continue
        activities = gpu_timeline(_rank_events(run, timeline.rank), patterns).activities
        figures[timeline.rank] = rank_figures(activities, waits_of(timeline.rank))
    return combine_gpu(timelines, figures, waits, actions is not None, run.root)


def by_rank(frame: pl.DataFrame) -> Callable[[int], pl.DataFrame]:
    """Rank -> that rank's rows of ``frame`` (empty when none), split in one pass rather than a filter per rank."""
    parts = frame.partition_by("rank", as_dict=True)
    empty = frame.clear()
    return lambda rank: parts.get((rank,), empty)
