"""The one road: a run's whole analysis, computed once, in one object every command and page reads.

``analyse(path, config)`` opens a run directory (or an op-table) and returns a ``RunAnalysis``.
Its parts are computed on first use and kept, each from the parts before it, so every figure of a
run comes from the same frames:

    run facts -> labelled actions -> GPU figures (when the traces hold GPU events)
      -> realized actions on one clock (``tracekit.analysis.realized``)
      -> utilization and bubbles, the replay case (dependency graph), the ideal
      -> stragglers, what-if, the critical path, the named-schedule comparison

``tracekit report``, ``stragglers``, ``whatif``, ``dashboard`` and ``dashboards/`` read only this
object; ``tracekit.present`` turns it into JSON payloads, tables and sentences.

Not for: computing any figure itself (the modules named on each property), or presenting it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import polars as pl

from collectors.manifest import Manifest
from tracekit.analysis.ideal import Ideal, IdealConfig, action_ops, ideal_durations
from tracekit.analysis.pipelines import ONE_PIPELINE, PipelineGroups, PipelineLayout, resolve_groups
from tracekit.analysis.realized import Clock, RealizedActions, RealizedSchedule, no_labels_error, realize
from tracekit.analysis.utilization import rank_utilization, replica_utilization, step_utilization
from tracekit.errors import TracekitError
from tracekit.gpu.analysis import GpuAnalysis
from tracekit.gpu.kernel_classes import KERNEL_PATTERNS, KernelPattern
from tracekit.perrank.engine import Engine
from tracekit.perrank.reduce import RunReductions, reduce_directory, reduce_loaded
from tracekit.stragglers.causes import CauseInputs, causes
from tracekit.stragglers.links import slow_links
from tracekit.stragglers.own_clock import clock_factors, rank_contention
from tracekit.stragglers.scoring import StragglerConfig, Stragglers, score_stragglers
from tracekit.stragglers.work import stage_work
from tracekit.trace.probes import Probes, read_probes
from tracekit.trace.run import Run
from tracekit.whatif.attribution import WhatIf, WhatIfConfig, what_if
from tracekit.whatif.case import ReplayCase
from tracekit.whatif.critical import critical_paths
from tracekit.whatif.megatron import megatron_case
from tracekit.whatif.named import NamedComparison, compare_named
from tracekit.whatif.optable import find_meta, read_meta, read_optable
from tracekit.whatif.pipeline import pipeline_case


@dataclass(frozen=True)
class AnalysisConfig:
    """Every choice the analysis of a run makes, one component's config per field."""

    kernel_patterns: tuple[KernelPattern, ...] = KERNEL_PATTERNS
    """Kernel-class patterns, tried in order (``tracekit.gpu.kernel_classes``)."""
    stragglers: StragglerConfig = field(default_factory=StragglerConfig)
    """Straggler thresholds (``tracekit.stragglers.scoring``)."""
    whatif: WhatIfConfig = field(default_factory=WhatIfConfig)
    """What-if choices (``tracekit.whatif.attribution``)."""
    ideal: IdealConfig = field(default_factory=IdealConfig)
    """How ideal durations are taken (``tracekit.analysis.ideal``)."""
    pipelines: PipelineLayout | None = None
    """How ranks form data-parallel replicas of the pipeline (``tracekit.analysis.pipelines``); None:
    run.json's pipeline groups, else one pipeline."""

    def __post_init__(self) -> None:
        if not self.kernel_patterns:
            raise ValueError("kernel_patterns must hold at least one pattern")


@dataclass(frozen=True)
class RunFacts:
    """What the run is: where it was read from, its ranks, and the collector's facts when it has a manifest."""

    root: str
    source: str
    """``kineto`` (a run directory) or ``op-table``."""
    world_size: int | None
    ranks_present: tuple[int, ...]
    missing_ranks: tuple[int, ...]
    partial: bool
    schedule: str | None
    pp: int | None
    microbatches: int | None
    steps_captured: list[int] | None
    torch_version: str | None
    hosts: list[str] | None


@dataclass(frozen=True)
class Utilization:
    """Busy and bubble time of the realized actions (``tracekit.analysis.utilization``)."""

    per_step: pl.DataFrame
    per_rank: pl.DataFrame
    per_replica: pl.DataFrame
    """One row per data-parallel replica (one row for a single pipeline)."""


@dataclass(frozen=True)
class Replay:
    """The run as a replay case (dependency graph plus op instances) and what was learnt building it."""

    case: ReplayCase
    warnings: tuple[str, ...]


def is_optable(path: Path) -> bool:
    """True when ``path`` names an op-table file rather than a run directory."""
    return Path(path).suffix == ".parquet"


@dataclass(frozen=True, eq=False)
class RunAnalysis:
    """The analysis of one run; each part is computed once, on first use (see the module docstring)."""

    source: Path
    config: AnalysisConfig
    loaded: Run | None
    """The loaded traces; None for an op-table."""
    meta: Path | None = None
    """An op-table's job metadata YAML; None: the one beside it."""
    given: pl.DataFrame | None = None
    """Realized actions given directly (simulated runs), analysed without traces; else None."""
    given_manifest: Manifest | None = None
    """The manifest that goes with ``given``."""
    given_stage_work: pl.DataFrame | None = None
    """Per-stage work (``tracekit.stragglers.work``) that goes with ``given``; None: the manifest's."""
    given_world_size: int | None = None
    """The job's ranks when ``given`` comes without a manifest (live intervals); None: the manifest's."""
    reductions: RunReductions | None = None
    """Every rank's reductions as ``analyse`` computed them beside the parse; None: computed from
    ``loaded`` on first use."""

    @classmethod
    def of_run(cls, run: Run, config: AnalysisConfig | None = None) -> RunAnalysis:
        """The analysis of an already loaded run."""
        return cls(source=run.root, config=config or AnalysisConfig(), loaded=run)

    @classmethod
    def of_actions(
        cls,
        actions: pl.DataFrame,
        manifest: Manifest | None = None,
        config: AnalysisConfig | None = None,
        source: str = "realized actions",
        stage_work: pl.DataFrame | None = None,
        world_size: int | None = None,
    ) -> RunAnalysis:
        """The analysis of a realized-actions frame (``REALIZED_SCHEMA``, one clock) without traces.

        ``world_size``: the job's ranks, for frames without a manifest (ranks missing from the frame
        are then listed as unjudged).
        """
        return cls(
            source=Path(source),
            config=config or AnalysisConfig(),
            loaded=None,
            given=actions,
            given_manifest=manifest,
            given_stage_work=stage_work,
            given_world_size=world_size,
        )

    # --- the run --------------------------------------------------------------------------------

    @property
    def run(self) -> Run:
        """The loaded traces; TracekitError for an op-table, which has none."""
        if self.loaded is None:
            raise TracekitError(
                "an op-table holds no traces: report and dashboard read a run directory", self.source
            )
        return self.loaded

    @property
    def is_optable(self) -> bool:
        """True when read from an op-table (Parquet + meta YAML) rather than trace files."""
        return self.loaded is None and self.given is None

    @cached_property
    def facts(self) -> RunFacts:
        """The run's facts (manifest fields are None when the capture wrote no manifest)."""
        if self.loaded is None:
            kind = "op-table" if self.given is None else "actions"
            return RunFacts(str(self.source), kind, None, (), (), False, None, None, None, None, None, None)
        run = self.loaded
        manifest = run.manifest
        schedule = None if manifest is None else manifest.schedule
        captured = None if manifest is None else manifest.steps.captured
        return RunFacts(
            root=str(run.root),
            source="kineto",
            world_size=run.world_size,
            ranks_present=tuple(run.ranks),
            missing_ranks=tuple(run.missing_ranks),
            partial=run.partial,
            schedule=None if schedule is None else schedule.name,
            pp=None if manifest is None else manifest.pp_size,
            microbatches=None if manifest is None else manifest.microbatches,
            steps_captured=None if captured is None else list(captured),
            torch_version=None if manifest is None else manifest.torch_version,
            hosts=None if manifest is None else list(manifest.hosts),
        )

    @property
    def run_warnings(self) -> tuple[str, ...]:
        """What loading the traces found (missing ranks, unreadable parts), and a layout overriding run.json."""
        return () if self.loaded is None else self.loaded.warnings + self._pipelines[1]

    @cached_property
    def reduced(self) -> RunReductions:
        """Every rank's labelled actions and GPU figures (``tracekit.perrank``), put together."""
        if self.reductions is not None:
            return self.reductions
        return reduce_loaded(self.run, self.config.kernel_patterns, self.config.pipelines)

    @property
    def has_schedule_labels(self) -> bool:
        """True when some rank's trace labels pipeline actions (``tracekit:``, ``PP:``, ...)."""
        if self.loaded is None:
            return self.given is not None
        return self.reduced.has_labels

    @property
    def has_gpu(self) -> bool:
        """True when some rank's trace holds GPU work (kernels, copies, memsets)."""
        return self.loaded is not None and self.reduced.gpu is not None

    def check_analysable(self) -> None:
        """TracekitError (the one "no schedule labels" message) when the run has neither labels nor GPU events."""
        if not self.has_schedule_labels and not self.has_gpu:
            raise no_labels_error(self.run.root)

    @cached_property
    def _pipelines(self) -> tuple[PipelineGroups, tuple[str, ...]]:
        if self.loaded is None:
            return ONE_PIPELINE, ()
        run = self.loaded
        return resolve_groups(run.manifest, self.config.pipelines, run.world_size, run.ranks, run.root)

    @property
    def pipelines(self) -> PipelineGroups:
        """The run's pipeline groups: each rank's replica (``tracekit.analysis.pipelines``)."""
        return self._pipelines[0]

    @cached_property
    def labelled(self) -> RealizedSchedule:
        """The labelled actions on their CPU spans; TracekitError when the run has no schedule labels."""
        return self.reduced.labelled(self.run.root)

    # --- GPU and the realized actions -----------------------------------------------------------

    @property
    def gpu(self) -> GpuAnalysis | None:
        """GPU breakdown, streams, overlap and sub-chunks (``tracekit.gpu.analysis``); None without GPU events.

        On a labelled run the same per-rank pass projects the actions onto the GPU work they launched.
        """
        return self.reduced.gpu if self.loaded is not None else None

    @cached_property
    def realized(self) -> RealizedActions:
        """The realized actions on one clock (``tracekit.analysis.realized.realize``)."""
        if self.given is not None:
            return RealizedActions(actions=self.given, clock=Clock.CPU, alignment=None, warnings=())
        labelled = self.labelled
        projection = self.gpu.action_projection if self.gpu is not None else None
        return realize(self.run, labelled, projection)

    @property
    def actions(self) -> pl.DataFrame:
        """The realized-actions frame (``REALIZED_SCHEMA``) every figure of the run reads."""
        return self.realized.actions

    @property
    def clock(self) -> Clock:
        """The clock the realized actions are timed on."""
        return self.realized.clock

    @cached_property
    def utilization(self) -> Utilization:
        """Per-step and per-rank busy, bubble and action counts of the realized actions."""
        per_step = step_utilization(self.actions)
        return Utilization(
            per_step=per_step,
            per_rank=rank_utilization(per_step),
            per_replica=replica_utilization(self.actions, per_step),
        )

    # --- replay, ideal, stragglers, what-if -----------------------------------------------------

    @cached_property
    def replay(self) -> Replay:
        """The dependency graph and op instances (``tracekit.whatif.pipeline`` / ``megatron``)."""
        if self.is_optable:
            job = read_meta(self.meta if self.meta is not None else find_meta(self.source))
            return Replay(megatron_case(read_optable(self.source), job, str(self.source)), ())
        case, warnings = pipeline_case(self.actions, str(self.source))
        return Replay(case, warnings)

    @property
    def case(self) -> ReplayCase:
        """The replay case alone."""
        return self.replay.case

    @cached_property
    def ideal_ops(self) -> pl.DataFrame:
        """The op instances the ideal is taken over: the case's ops (op-tables), else ``action_ops``."""
        return self.case.ops if self.is_optable else action_ops(self.actions)

    @cached_property
    def ideal(self) -> Ideal:
        """The ideal duration of every op (``tracekit.analysis.ideal``), the one ideal of the run."""
        return ideal_durations(self.ideal_ops, self.config.ideal.method_for(self.facts.source))

    @cached_property
    def stragglers(self) -> Stragglers:
        """Every rank against its reference and priced (``tracekit.stragglers.scoring``)."""
        manifest = self.manifest
        work = (
            self.given_stage_work
            if self.given_stage_work is not None
            else stage_work(manifest, str(self.source))
        )
        return score_stragglers(
            self.case,
            self.config.stragglers,
            work,
            world_size=self.given_world_size if manifest is None else manifest.world_size,
            clock=self.own_clock,
        )

    @cached_property
    def probes(self) -> Probes | None:
        """The collector's per-action probes (``tracekit.trace.probes``); None when the run has none."""
        if self.loaded is None:
            return None
        return read_probes(self.loaded.root, tuple(self.loaded.ranks))

    @cached_property
    def own_clock(self) -> pl.DataFrame | None:
        """Per (rank, step, stage, kind) own-clock factors (``tracekit.stragglers.own_clock``) on CPU
        clocks with probes; None otherwise (GPU kernel time is already the rank's own clock)."""
        if self.probes is None or self.clock is not Clock.CPU:
            return None
        return clock_factors(self.probes.actions, self.probes.window)

    @cached_property
    def causes(self) -> pl.DataFrame:
        """Every straggler's and slow link's causes (``tracekit.stragglers.causes.CAUSE_SCHEMA``)."""
        probes = self.probes
        clock = self.own_clock
        return causes(
            CauseInputs(
                stragglers=self.stragglers,
                ops=self.case.ops,
                gpu_clock=not self.is_optable and self.clock is Clock.GPU,
                clock=clock,
                contention=None if clock is None or probes is None else rank_contention(probes.window),
                links=self.slow_links,
                nvml=None if probes is None else probes.nvml,
            )
        )

    @cached_property
    def slow_links(self) -> pl.DataFrame | None:
        """Communication stragglers (``tracekit.stragglers.links.LINK_SCHEMA``); None for an op-table."""
        if self.is_optable:
            return None
        return slow_links(self.actions, float(self.case.measured_ms().mean()))

    @cached_property
    def critical_path(self) -> pl.DataFrame:
        """Each step's critical path through the run replayed as recorded (``tracekit.whatif.critical``).

        Every action occupies its duration after its gap (``ReplayCase.occupied_ms``), so the path
        ends at the recorded step's end and its transfers are the gaps between its actions.
        TracekitError for an op-table.
        """
        if self.is_optable:
            raise TracekitError("an op-table replays many replicas per op: no single critical path", self.source)
        case = self.case
        recorded = case.occupied_ms(case.ops["duration_ms"].to_numpy())
        return critical_paths(case, recorded, case.ops["gap_ms"].to_numpy())

    @cached_property
    def whatif(self) -> WhatIf:
        """Realized against ideal replay and its attribution (``tracekit.whatif.attribution``)."""
        return what_if(self.case, self.config.whatif, self.ideal.per_op(self.case.ops))

    @cached_property
    def _named(self) -> tuple[NamedComparison | None, tuple[str, ...]]:
        if self.is_optable:
            return None, ()
        return compare_named(self.case, self.manifest, self.whatif, self.ideal)

    @property
    def named(self) -> NamedComparison | None:
        """The named schedule at typical costs against this run (``tracekit.whatif.named``); None when unknown."""
        return self._named[0]

    @property
    def named_warnings(self) -> tuple[str, ...]:
        """Why there is no named-schedule comparison, when there is none."""
        return self._named[1]

    @property
    def manifest(self) -> Manifest | None:
        """The collector's run.json; None for op-tables and runs captured by other tools."""
        return self.given_manifest if self.loaded is None else self.loaded.manifest


def analyse(
    path: Path | str,
    config: AnalysisConfig | None = None,
    meta: Path | None = None,
    load: Callable[[Path], Run] | None = None,
    engine: Engine | None = None,
    on_start: Callable[[int], None] | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> RunAnalysis:
    """Open the run in ``path`` (a trace directory, or an op-table ``.parquet``) for analysis.

    Each rank's trace is read and reduced now, as a task of ``engine`` (default: one worker process
    per core, ``tracekit.perrank.engine.LocalEngine``; a ``DaskEngine`` runs them on a cluster),
    reusing the caches beside the traces; everything that needs every rank, later, on first use.
    ``load`` instead loads the traces with that function (``tracekit.trace.run.load_run``) and
    reduces them here on first use. ``on_start(n)``/``on_file(path)`` report progress over the
    trace files. ``meta`` is an op-table's job metadata. TracekitError on unreadable input.
    """
    path = Path(path)
    config = config or AnalysisConfig()
    if is_optable(path):
        if not path.is_file():
            raise TracekitError("no such op-table file", path)
        if config.pipelines is not None:
            raise TracekitError(
                "--pipelines is for trace directories: an op-table names each op's data-parallel rank", path
            )
        return RunAnalysis(source=path, config=config, loaded=None, meta=meta)
    if load is not None:
        return RunAnalysis(source=path, config=config, loaded=load(path))
    run, reductions = reduce_directory(path, config.kernel_patterns, config.pipelines, engine, on_start, on_file)
    return RunAnalysis(source=path, config=config, loaded=run, reductions=reductions)
