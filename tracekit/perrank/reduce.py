"""A run's per-rank reductions: computed once per rank where its trace is, put together here.

``reduce_directory`` is how ``tracekit.analyse`` opens a run directory: one task per trace file
parses it (or reuses its Parquet cache) and reduces it to a ``RankSummary`` (labelled actions, the
GPU timeline's per-rank part); this process matches every rank's p2p kernels in one pass
(``tracekit.gpu.analysis.run_waits``); a second task per GPU rank turns its activities and waits
into its breakdown, streams and overlap. Only summaries travel. With ``LocalEngine`` a result
already in the derived cache is read here, so a second command on an unchanged run starts no
worker; with ``DaskEngine`` every read is a task on the cluster.

``reduce_loaded`` does the same for a run already loaded (``RunAnalysis.of_run``), in this process.

Not for: the reductions themselves (``tracekit.perrank.tasks``) or what follows them
(``tracekit.run_analysis``: clock choice and alignment, dependencies, replay).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from collectors.manifest import Manifest
from tracekit.analysis.pipelines import PipelineGroups, PipelineLayout, resolve_groups
from tracekit.analysis.realized import RankLabels, RealizedSchedule, combine_labels, default_stage
from tracekit.gpu.analysis import GpuAnalysis, RankFigures, by_rank, combine_gpu, run_waits
from tracekit.gpu.kernel_classes import KernelPattern
from tracekit.perrank.engine import Engine, LocalEngine, run_tasks
from tracekit.perrank.tasks import (
    FiguresJob,
    RankJob,
    RankSummary,
    cached_figures,
    cached_summary,
    figure_rank,
    summarise_rank,
)
from tracekit.trace.provenance import check_one_capture, read_sidecars
from tracekit.trace.run import Run, assemble_run, cache_dir_of, read_manifest, trace_files

Job = TypeVar("Job")
Result = TypeVar("Result")


@dataclass(frozen=True)
class RunReductions:
    """Every rank's reductions, put together: what ``RunAnalysis`` reads instead of the events."""

    labels: tuple[RankLabels, ...]
    """Each present rank's labelled actions, in rank order."""
    gpu: GpuAnalysis | None
    """The run's GPU figures; None when no rank's trace holds GPU work."""
    groups: PipelineGroups
    """The run's pipeline groups, which give each action its replica."""

    @property
    def has_labels(self) -> bool:
        """True when some rank's trace labels pipeline actions."""
        return any(rank.labelled for rank in self.labels)

    def labelled(self, root: object) -> RealizedSchedule:
        """The run's labelled actions (``combine_labels``); TracekitError when no rank has labels."""
        return combine_labels(list(self.labels), root, self.groups)


class _Pool:
    """The engine's executor, opened on first use and kept for every batch of the run."""

    def __init__(self, engine: Engine, stack: ExitStack) -> None:
        self.engine, self.stack = engine, stack
        self.opened = False
        self.executor: Executor | None = None

    def get(self, jobs: Sequence[object]) -> Executor | None:
        """The executor, opened for ``jobs`` (its size from theirs) when this is the first batch."""
        if not self.opened:
            self.executor = self.stack.enter_context(self.engine.executor(len(jobs), _trace_bytes(jobs)))
            self.opened = True
        return self.executor


def _trace_bytes(jobs: Sequence[object]) -> int:
    """The trace bytes ``jobs`` read: their ``trace`` files' sizes (a job without one reads none)."""
    total = 0
    for job in jobs:
        trace = getattr(job, "trace", None)
        if trace is not None:
            try:
                total += trace.stat().st_size
            except OSError:  # the task names the missing file itself
                pass
    return total


def _gather(
    pool: _Pool,
    task: Callable[[Job], Result],
    cached: Callable[[Job], Result | None],
    jobs: Sequence[Job],
    on_done: Callable[[Job], None] | None = None,
) -> list[Result]:
    """``task`` of every job; results already cached are read here when the engine allows it."""
    found: dict[int, Result] = {}
    if pool.engine.reads_here:
        for index, job in enumerate(jobs):
            result = cached(job)
            if result is not None:
                found[index] = result
                if on_done:
                    on_done(job)
    todo = [index for index in range(len(jobs)) if index not in found]
    if todo:
        batch = [jobs[index] for index in todo]
        computed = run_tasks(pool.get(batch), task, batch, on_done)
        found.update(zip(todo, computed))
    return [found[index] for index in range(len(jobs))]


def _restaged(
    run: Run,
    jobs: list[RankJob],
    summaries: list[RankSummary],
    pool: _Pool,
    layout: PipelineLayout | None,
) -> tuple[list[RankSummary], PipelineGroups]:
    """The run's pipeline groups, and its summaries (rank order) with every label that names no stage
    given its rank's place in its pipeline: ranks reduced before the groups were known are reduced
    again (only when a layout names groups run.json does not, and labels lack stages)."""
    groups, _ = resolve_groups(run.manifest, layout, run.world_size, run.ranks, run.root)
    expected = {rank: default_stage(run.manifest, groups, rank) for rank in run.ranks}
    stages = tuple(sorted(expected.items()))
    by_trace = {job.trace: job for job in jobs}
    again = [
        index
        for index, summary in enumerate(summaries)
        if summary.labels.stage_given and summary.labels.stage != expected[summary.info.rank]
    ]
    redone = _gather(
        pool,
        summarise_rank,
        cached_summary,
        [replace(by_trace[summaries[i].info.path], stages=stages) for i in again],
    )
    fixed = list(summaries)
    for index, summary in zip(again, redone):
        fixed[index] = summary
    return fixed, groups


def _early_stages(
    manifest: Manifest | None, layout: PipelineLayout | None, root: Path
) -> tuple[tuple[int, int], ...]:
    """Each rank's stage for labels that name none, when run.json (or a layout with its world size) tells."""
    if manifest is None and layout is not None:
        return ()  # the layout's groups need the world size the traces give
    world_size = manifest.world_size if manifest is not None else 0
    groups, _ = resolve_groups(manifest, layout, world_size, (), root)
    ranks = range(world_size) if manifest is not None else ()
    return tuple((rank, default_stage(manifest, groups, rank)) for rank in ranks)


def _put_together(
    run: Run,
    summaries: list[RankSummary],
    groups: PipelineGroups,
    pool: _Pool,
    cache_dir_of_rank: Callable[[RankSummary], Path],
    patterns: tuple[KernelPattern, ...],
) -> RunReductions:
    """The run's reductions from its ranks' summaries (rank order): p2p waits here, GPU figures as tasks."""
    labels = tuple(summary.labels for summary in summaries)
    timelines = [summary.timeline for summary in summaries]
    if not any(timeline.has_gpu for timeline in timelines):
        return RunReductions(labels=labels, gpu=None, groups=groups)
    waits = run_waits(timelines)
    waits_of = by_rank(waits)
    kept = [summary for summary in summaries if summary.timeline.subchunks is not None]
    jobs = [
        FiguresJob(
            table=summary.table,
            cut=summary.cut,
            timeline_key=summary.timeline_key,
            cache_dir=cache_dir_of_rank(summary),
            patterns=patterns,
            waits=waits_of(summary.info.rank),
        )
        for summary in kept
    ]
    figures: list[RankFigures] = _gather(pool, figure_rank, cached_figures, jobs)
    with_actions = any(label.labelled for label in labels)
    by_summary = {summary.info.rank: found for summary, found in zip(kept, figures)}
    gpu = combine_gpu(timelines, by_summary, waits, with_actions, run.root, groups)
    return RunReductions(labels=labels, gpu=gpu, groups=groups)


def reduce_directory(
    root: Path,
    patterns: tuple[KernelPattern, ...],
    layout: PipelineLayout | None = None,
    engine: Engine | None = None,
    on_start: Callable[[int], None] | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> tuple[Run, RunReductions]:
    """Load the run in ``root`` and reduce every rank where its trace is; TracekitError on bad input.

    ``layout`` names the pipeline groups when run.json does not (``AnalysisConfig.pipelines``);
    ``on_start(n)`` and ``on_file(path)`` let a caller draw progress over the trace files.
    """
    root = Path(root)
    engine = engine or LocalEngine()
    files = trace_files(root)
    cache_dir = cache_dir_of(root)
    if not engine.reads_here:  # other machines resolve relative paths against their own directory
        files, cache_dir = [path.absolute() for path in files], cache_dir.absolute()
    manifest = read_manifest(root)
    metas = read_sidecars(files)
    check_one_capture(metas, manifest, root)
    stages = _early_stages(manifest, layout, root)
    jobs = [RankJob(path, cache_dir, metas.get(path), stages, patterns) for path in files]
    if on_start:
        on_start(len(files))
    with ExitStack() as stack:
        pool = _Pool(engine, stack)
        done = _gather(
            pool, summarise_rank, cached_summary, jobs, (lambda job: on_file(job.trace)) if on_file else None
        )
        cuts = {job.trace: summary.cut for job, summary in zip(jobs, done) if summary.cut is not None}
        run = assemble_run(
            root, files, manifest, [(summary.table, summary.info) for summary in done], metas, cuts
        )
        summaries, groups = _restaged(
            run, jobs, sorted(done, key=lambda summary: summary.info.rank), pool, layout
        )
        return run, _put_together(run, summaries, groups, pool, lambda _summary: cache_dir, patterns)


def reduce_loaded(
    run: Run,
    patterns: tuple[KernelPattern, ...],
    layout: PipelineLayout | None = None,
    engine: Engine | None = None,
) -> RunReductions:
    """The reductions of a run already loaded (``tracekit.trace.run.load_run``), from its cached tables."""
    files = [trace.path for trace in run.traces]
    metas = read_sidecars(files)
    groups, _ = resolve_groups(run.manifest, layout, run.world_size, run.ranks, run.root)
    stages = tuple((rank, default_stage(run.manifest, groups, rank)) for rank in run.ranks)
    jobs = [
        RankJob(trace.path, table.parent, metas.get(trace.path), stages, patterns)
        for trace, table in zip(run.traces, run.tables)
    ]
    with ExitStack() as stack:
        pool = _Pool(engine or LocalEngine(workers=1), stack)
        summaries = _gather(pool, summarise_rank, cached_summary, jobs)
        return _put_together(run, summaries, groups, pool, lambda summary: summary.table.parent, patterns)
