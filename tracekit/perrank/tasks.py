"""The per-rank tasks: what runs where a rank's trace is, and the small summaries that come back.

Two tasks per rank, both plain functions of small picklable arguments, run in a worker process
or on a Dask worker, or here:

- ``summarise_rank``: parse the trace (or reuse its Parquet cache), then reduce it to its labelled
  actions (``tracekit.analysis.realized.rank_labels``) and its GPU timeline's per-rank part
  (``tracekit.gpu.analysis.rank_timeline``). The GPU activities stay in the derived cache; only
  the summary travels.
- ``figure_rank``: given the rank's p2p waits (which need every rank's kernels), its breakdown,
  per-stream activity and overlap (``tracekit.gpu.analysis.rank_figures``).

Each result is kept in the derived cache (``tracekit.perrank.cache``); ``cached_summary`` and
``cached_figures`` read it without computing, which is how a second command on a run starts no
worker at all.

Not for: putting the ranks together (``tracekit.perrank.reduce``) or the figures' definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from collectors.manifest import RankMeta
from tracekit.analysis.realized import RANK_ACTIONS_SCHEMA, RankLabels, rank_labels
from tracekit.gpu.analysis import (
    NEEDED_CATEGORIES,
    P2P_SCHEMA,
    RankFigures,
    RankTimeline,
    rank_figures,
    rank_timeline,
)
from tracekit.gpu.breakdown import BREAKDOWN_SCHEMA, STREAM_SCHEMA
from tracekit.gpu.kernel_classes import KernelPattern
from tracekit.gpu.overlap import OVERLAP_SCHEMA
from tracekit.gpu.schedule import RANK_PROJECTION_SCHEMA, SUBCHUNK_SCHEMA
from tracekit.gpu.timeline import GPU_SCHEMA, gpu_timeline
from tracekit.perrank.cache import derived_key, frame_digest, read_entry, write_entry
from tracekit.trace.kineto import TraceInfo
from tracekit.trace.provenance import Cut, cut_points
from tracekit.trace.run import cached_table, check_table, parse_one

_SUMMARY_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "actions": RANK_ACTIONS_SCHEMA,
    "p2p": P2P_SCHEMA,
    "projection": RANK_PROJECTION_SCHEMA,
    "subchunks": SUBCHUNK_SCHEMA,
}
_ACTIVITIES = {"activities": GPU_SCHEMA}
_FIGURES = {"breakdown": BREAKDOWN_SCHEMA, "streams": STREAM_SCHEMA, "overlap": OVERLAP_SCHEMA}


@dataclass(frozen=True)
class RankJob:
    """One trace file to summarise, and every input that shapes its summary."""

    trace: Path
    cache_dir: Path
    """Where the trace's parsed events and derived entries are kept."""
    meta: RankMeta | None
    """The collector's sidecar of the trace (it names an unfinished step to cut); None without one."""
    stages: tuple[tuple[int, int], ...]
    """(rank, stage) for labels that name no stage (``tracekit.analysis.realized.default_stage``), as
    far as known before the traces are read; other ranks': their rank."""
    patterns: tuple[KernelPattern, ...]


@dataclass(frozen=True)
class RankSummary:
    """What one rank's trace gives alone: its facts, its labelled actions, its GPU timeline's part."""

    table: Path
    """The rank's parsed event table (Parquet)."""
    info: TraceInfo
    cut: Cut | None
    """Where the trace stops counting (a step that did not finish); None: the whole trace counts."""
    labels: RankLabels
    timeline: RankTimeline
    timeline_key: str
    """The derived entry holding the rank's GPU activities, which ``figure_rank`` reads."""


@dataclass(frozen=True, eq=False)
class FiguresJob:
    """One rank's GPU figures to compute: where its activities are, and its p2p waits."""

    table: Path
    """The rank's parsed event table (activities are rebuilt from it if their entry was lost)."""
    cut: Cut | None
    timeline_key: str
    """The derived entry holding the rank's GPU activities (``RankSummary.timeline_key``)."""
    cache_dir: Path
    patterns: tuple[KernelPattern, ...]
    waits: pl.DataFrame
    """This rank's rows of ``tracekit.gpu.analysis.run_waits``."""


def _events(table: Path, cut: Cut | None, parsed: pl.DataFrame | None = None) -> pl.DataFrame:
    """The rank's event rows the reductions read, without those of a step that did not finish
    (from ``parsed``, the table just parsed, when given: it need not be read back)."""
    events = parsed.lazy() if parsed is not None else pl.scan_parquet(table)
    if cut is not None:
        events = events.filter(pl.col("start_ns") < cut.start_ns)
    return events.filter(pl.col("cat").is_in(NEEDED_CATEGORIES)).collect()


def _summary(
    job: RankJob, table: Path, info: TraceInfo, compute: bool, parsed: pl.DataFrame | None = None
) -> RankSummary | None:
    check_table(table, info)
    cut = cut_points({job.trace: job.meta}, {job.trace: table}).get(job.trace) if job.meta else None
    stage = dict(job.stages).get(info.rank, info.rank)
    key = derived_key(table, "rank", (info.rank, stage, None if cut is None else cut.start_ns, job.patterns))
    entry = read_entry(job.cache_dir, key, _SUMMARY_SCHEMAS)
    if entry is None:
        if not compute:
            return None
        entry = _reduce(job, _events(table, cut, parsed), info, stage, key)
    frames, facts = entry
    labels = RankLabels(
        rank=info.rank,
        actions=frames["actions"],
        outside=int(facts["outside"]),
        labelled=bool(facts["labelled"]),
        stage=stage,
        stage_given=bool(facts["stage_given"]),
        overran=int(facts.get("overran", 0)),
        longest_overrun_ns=int(facts.get("longest_overrun_ns", 0)),
    )
    timeline = RankTimeline(
        rank=info.rank,
        has_gpu=bool(facts["has_gpu"]),
        p2p=frames["p2p"],
        subchunks=frames["subchunks"] if facts["has_activities"] else None,
        projection=frames["projection"],
        warnings=tuple(facts["warnings"]),
        subchunk_warnings=tuple(facts["subchunk_warnings"]),
    )
    return RankSummary(table=table, info=info, cut=cut, labels=labels, timeline=timeline, timeline_key=key)


def _reduce(
    job: RankJob, events: pl.DataFrame, info: TraceInfo, stage: int, key: str
) -> tuple[dict[str, pl.DataFrame], dict[str, object]]:
    """Compute and store one rank's summary entry (and its GPU activities) from its events (``_events``)."""
    labels = rank_labels(events.filter(pl.col("cat") == "user_annotation"), info.rank, stage)
    timeline, activities = rank_timeline(events, info.rank, job.patterns, labels.actions)
    subchunks = timeline.subchunks
    frames = {
        "actions": labels.actions,
        "p2p": timeline.p2p,
        "projection": timeline.projection,
        "subchunks": subchunks if subchunks is not None else pl.DataFrame(schema=SUBCHUNK_SCHEMA),
    }
    facts: dict[str, object] = {
        "outside": labels.outside,
        "labelled": labels.labelled,
        "stage_given": labels.stage_given,
        "overran": labels.overran,
        "longest_overrun_ns": labels.longest_overrun_ns,
        "has_gpu": timeline.has_gpu,
        "has_activities": subchunks is not None,
        "warnings": list(timeline.warnings),
        "subchunk_warnings": list(timeline.subchunk_warnings),
    }
    activities = activities.select(list(GPU_SCHEMA)).cast(GPU_SCHEMA)  # type: ignore[arg-type]
    write_entry(job.cache_dir, key, {**frames, "activities": activities}, facts)
    return frames, facts


def summarise_rank(job: RankJob) -> RankSummary:
    """Parse ``job.trace`` (or reuse its cache) and reduce it to its summary (or reuse that); runs in a worker."""
    job.cache_dir.mkdir(parents=True, exist_ok=True)
    table, info, parsed = parse_one(job.trace, job.cache_dir)
    summary = _summary(job, table, info, compute=True, parsed=parsed)
    assert summary is not None
    return summary


def cached_summary(job: RankJob) -> RankSummary | None:
    """The rank's summary from the caches alone; None when its parse or its reduction must be computed."""
    cached = cached_table(job.trace, job.cache_dir)
    return None if cached is None else _summary(job, *cached, compute=False)


def _figures_key(job: FiguresJob) -> str:
    return derived_key(job.table, "figures", (job.timeline_key, frame_digest(job.waits)))


def _read_figures(job: FiguresJob) -> RankFigures | None:
    entry = read_entry(job.cache_dir, _figures_key(job), _FIGURES)
    return None if entry is None else RankFigures(**entry[0])


def figure_rank(job: FiguresJob) -> RankFigures:
    """The rank's breakdown, streams and overlap given its waits (or the stored ones); runs in a worker."""
    found = _read_figures(job)
    if found is not None:
        return found
    stored = read_entry(job.cache_dir, job.timeline_key, _ACTIVITIES)
    if stored is not None:
        activities = stored[0]["activities"]
    else:  # the activities were lost or damaged since the summary: rebuild them from the events
        activities = gpu_timeline(_events(job.table, job.cut), job.patterns).activities
    figures = rank_figures(activities, job.waits)
    write_entry(
        job.cache_dir,
        _figures_key(job),
        {"breakdown": figures.breakdown, "streams": figures.streams, "overlap": figures.overlap},
        {},
    )
    return figures


def cached_figures(job: FiguresJob) -> RankFigures | None:
    """The rank's figures from the derived cache alone; None when they must be computed."""
    return _read_figures(job)
