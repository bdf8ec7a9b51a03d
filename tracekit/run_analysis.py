"""The one road: a run's whole analysis, computed once, in one object every command and page reads.

``analyse(path, config)`` opens a run directory (or an op-table) and returns a ``RunAnalysis``.
Its parts are computed on first use and kept, each from the parts before it, so every figure of a
run comes from the same frames:

    run facts -> labelled actions -> GPU figures (when the traces hold GPU events)
      -> realized actions on one clock (``tracekit.analysis.realized``)
      -> utilization and bubbles, the replay case (dependency graph), the ideal
      -> stragglers, what-if, the critical path, the named-schedule comparison
      -> memory per rank against the schedule (the labelled actions and each trace's memory events)

``tracekit report``, ``stragglers``, ``whatif``, ``dashboard`` and ``dashboards/`` read only this
object; ``tracekit.present`` turns it into JSON payloads, tables and sentences. What the page
needs beyond its parts (the definitions it quotes, ``covered_bins`` for the heatmap, the known
schedules) is re-exported here, so nothing above this module imports what computes below it.

Not for: computing any figure itself (the modules named on each property), or presenting it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from collectors.manifest import Manifest
from tracekit.analysis.choices import IDEAL_DEFINITION as IDEAL_DEFINITION
from tracekit.analysis.choices import IdealConfig, LinkConfig, StragglerConfig, WhatIfConfig
from tracekit.analysis.intervals import covered_bins as covered_bins
from tracekit.analysis.memory_run import Memory, no_memory, run_memory
from tracekit.analysis.pipelines import (
    ONE_PIPELINE,
    PipelineGroups,
    PipelineLayout,
    pipeline_positions,
    resolve_groups,
)
from tracekit.analysis.realized import Clock, RealizedActions, RealizedSchedule, no_labels_error, realize
from tracekit.analysis.utilization import rank_utilization, replica_utilization, step_utilization
from tracekit.errors import TracekitError
from tracekit.gpu.analysis import GpuAnalysis
from tracekit.gpu.kernel_classes import KERNEL_PATTERNS, KernelPattern
from tracekit.perrank.engine import Engine
from tracekit.perrank.reduce import RunReductions, reduce_directory, reduce_loaded
from tracekit.run_sources import ActionsSource, KinetoSource, OpTableSource, RunSource
from tracekit.trace.run import Run

# The replay, the ideal, the stragglers and the what-if (with numpy, the simulator and the op-table's yaml)
# are imported where each part is computed, not here: a command that reads only the GPU figures and
# the bubbles of a cached run (``tracekit report``) then loads none of them.
if TYPE_CHECKING:
    import numpy as np

    from tracekit.analysis.ideal import Ideal
    from tracekit.schedule.costs import Costs
    from tracekit.stragglers.causes import CauseInputs
    from tracekit.stragglers.scoring import Stragglers
    from tracekit.trace.probes import Probes
    from tracekit.whatif.attribution import WhatIf
    from tracekit.whatif.case import ReplayCase
    from tracekit.whatif.comparison import ScheduleComparison
    from tracekit.whatif.named import NamedComparison

_LAZY = {
    "COMPARISON_DEFINITION": ("tracekit.whatif.comparison", "COMPARISON_DEFINITION"),
    "NEAR_CAPACITY": ("tracekit.analysis.memory", "NEAR_CAPACITY"),
}
"""Names re-exported from modules below that load numpy or the what-if, imported on first access."""


def __getattr__(name: str) -> Any:
    """The names of ``_LAZY``, and ``KNOWN_SCHEDULES``: the schedules the simulator generates
    (``tracekit.schedule.registry``), for the comparison; each imported on first access (PEP 562)."""
    if name == "KNOWN_SCHEDULES":
        from tracekit.schedule.registry import GENERATORS  # here: the generators load the simulator

        return tuple(GENERATORS)
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    links: LinkConfig = field(default_factory=LinkConfig)
    """Communication-straggler thresholds (``tracekit.stragglers.links``)."""
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
    node_of_action: np.ndarray | None = None
    """Per row of the realized actions, its op's row in ``case.ops``; None for an op-table."""


@dataclass(frozen=True)
class IdealTimeline:
    """The what-if's ideal replay as a timeline (``tracekit.whatif.timeline``) and its utilization."""

    actions: pl.DataFrame
    """``REALIZED_SCHEMA``: every action re-timed by the ideal replay, each step from 0 ns."""
    utilization: Utilization
    """Busy and bubble of ``actions``, measured as the realized ones are."""
    step_ms: np.ndarray
    """The ideal step times, ``steps`` order: the what-if's ``ideal_ms``, the same numbers."""


def is_optable(path: Path) -> bool:
    """True when ``path`` names an op-table file rather than a run directory."""
    return Path(path).suffix == ".parquet"


@dataclass(frozen=True, eq=False)
class RunAnalysis:
    """The analysis of one run; each part is computed once, on first use (see the module docstring)."""

    source: Path
    config: AnalysisConfig
    data: RunSource
    """What the run was read from (``tracekit.run_sources``): traces, an op-table or given actions."""

    @classmethod
    def of_run(cls, run: Run, config: AnalysisConfig | None = None) -> RunAnalysis:
        """The analysis of an already loaded run."""
        return cls(source=run.root, config=config or AnalysisConfig(), data=KinetoSource(run))

    @classmethod
    def of_actions(
        cls,
        actions: pl.DataFrame,
        manifest: Manifest | None = None,
        config: AnalysisConfig | None = None,
        source: str = "realized actions",
        stage_work: pl.DataFrame | None = None,
        world_size: int | None = None,
        schedule_class: str | None = None,
    ) -> RunAnalysis:
        """The analysis of a realized-actions frame (``REALIZED_SCHEMA``, one clock) without traces.

        ``world_size``: the job's ranks, for frames without a manifest (ranks missing from the frame
        are then listed as unjudged); ``schedule_class``: the schedule's class, for frames without a
        manifest (it decides the replay's peer waits, ``tracekit.whatif.pipeline``).
        """
        return cls(
            source=Path(source),
            config=config or AnalysisConfig(),
            data=ActionsSource(actions, manifest, stage_work, world_size, schedule_class),
        )

    @property
    def loaded(self) -> Run | None:
        """The loaded traces; None for an op-table or given actions."""
        return self.data.run if isinstance(self.data, KinetoSource) else None

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
        return isinstance(self.data, OpTableSource)

    @cached_property
    def facts(self) -> RunFacts:
        """The run's facts (manifest fields are None when the capture wrote no manifest)."""
        if self.loaded is None:
            return RunFacts(str(self.source), self.data.kind, None, (), (), False, None, None, None, None, None, None)
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
        if isinstance(self.data, KinetoSource) and self.data.reductions is not None:
            return self.data.reductions
        return reduce_loaded(self.run, self.config.kernel_patterns, self.config.pipelines)

    @property
    def has_schedule_labels(self) -> bool:
        """True when some rank's trace labels pipeline actions (``tracekit:``, ``PP:``, ...)."""
        if self.loaded is None:
            return isinstance(self.data, ActionsSource)
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
        if isinstance(self.data, ActionsSource):
            return RealizedActions(actions=self.data.actions, clock=Clock.CPU, alignment=None, warnings=())
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
        from tracekit.whatif.megatron import megatron_case  # here: the op-table path loads yaml
        from tracekit.whatif.optable import find_meta, read_meta, read_optable
        from tracekit.whatif.pipeline import pipeline_case_nodes  # here: see the top

        if isinstance(self.data, OpTableSource):
            job = read_meta(self.data.meta if self.data.meta is not None else find_meta(self.source))
            return Replay(megatron_case(read_optable(self.source), job, str(self.source)), ())
        case, warnings, node_of_action = pipeline_case_nodes(self.actions, str(self.source), self.schedule_class)
        return Replay(case, warnings, node_of_action)

    @property
    def case(self) -> ReplayCase:
        """The replay case alone."""
        return self.replay.case

    @cached_property
    def stage_work(self) -> pl.DataFrame:
        """Per-stage work (``tracekit.analysis.work``): the given frame, else the manifest's (maybe empty)."""
        if isinstance(self.data, ActionsSource) and self.data.stage_work is not None:
            return self.data.stage_work
        from tracekit.analysis.work import stage_work  # here: only the ideal and the stragglers read it

        return stage_work(self.manifest, str(self.source))

    @property
    def ideal_ops(self) -> pl.DataFrame:
        """The op instances the ideal is taken over: the replay case's ops (``OPS_SCHEMA``), each compute
        op on its rank's own clock where the collector's probes give one (``stragglers.own_clock``)."""
        from tracekit.stragglers.own_clock import on_own_clock  # here: see the imports at the top

        return on_own_clock(self.case.ops, self.op_clock)

    @cached_property
    def ideal(self) -> Ideal:
        """The ideal duration of every op (``tracekit.analysis.ideal``), the one ideal of the run."""
        from tracekit.analysis.ideal import ideal_durations  # here: see the imports at the top

        method = self.config.ideal.method_for(self.facts.source)
        return ideal_durations(self.ideal_ops, method, self.stage_work)

    @cached_property
    def reference_ideal(self) -> Ideal:
        """The robust ideal straggler prices replay: ``ideal`` itself unless it is osdi25 (op-tables)."""
        if self.ideal.method == "robust":
            return self.ideal
        from tracekit.analysis.ideal import ideal_durations  # here: see the imports at the top

        return ideal_durations(self.ideal_ops, "robust", self.stage_work)

    @cached_property
    def stragglers(self) -> Stragglers:
        """Every rank against its reference and priced (``tracekit.stragglers.scoring``)."""
        from tracekit.stragglers.scoring import score_stragglers  # here: see the imports at the top

        return score_stragglers(
            self.case,
            self.config.stragglers,
            self.stage_work,
            world_size=self.data.world_size,
            ideal=self.reference_ideal,
            clock=self.op_clock,
        )

    @cached_property
    def probes(self) -> Probes | None:
        """The collector's per-action probes (``tracekit.trace.probes``); None when the run has none."""
        if self.loaded is None:
            return None
        from tracekit.trace.probes import read_probes  # here: only the stragglers read the probes

        return read_probes(self.loaded.root, tuple(self.loaded.ranks))

    @cached_property
    def contention(self) -> pl.DataFrame | None:
        """Each rank's waits for a core against the other ranks' (``own_clock.RANK_CLOCK_SCHEMA``) on
        CPU clocks with probes; None otherwise (GPU kernel time is already the rank's own clock)."""
        if self.probes is None or self.clock is not Clock.CPU:
            return None
        from tracekit.stragglers.own_clock import rank_contention  # here: see the imports at the top

        return rank_contention(self.probes.window, self.probes.actions)

    @cached_property
    def judged_actions(self) -> pl.DataFrame | None:
        """The probes' actions with their share of the host's wait (``own_clock.judged_actions``);
        None where ``contention`` is."""
        if self.contention is None or self.probes is None:
            return None
        from tracekit.stragglers.own_clock import judged_actions  # here: see the imports at the top

        return judged_actions(self.probes.actions, self.contention)

    @cached_property
    def own_clock(self) -> pl.DataFrame | None:
        """Per (rank, step, stage, kind) sums of the judged actions (``own_clock.CLOCK_SCHEMA``);
        None where ``contention`` is."""
        if self.judged_actions is None:
            return None
        from tracekit.stragglers.own_clock import clock_sums  # here: see the imports at the top

        return clock_sums(self.judged_actions)

    @cached_property
    def op_clock(self) -> pl.DataFrame | None:
        """Each replay op's on-CPU time and share of the host's wait (``own_clock.OP_CLOCK_SCHEMA``);
        None where ``contention`` is, or for a case without realized actions."""
        if self.judged_actions is None or self.replay.node_of_action is None:
            return None
        from tracekit.stragglers.own_clock import op_clock  # here: see the imports at the top

        return op_clock(self.judged_actions, self.actions, self.replay.node_of_action)

    @cached_property
    def cause_inputs(self) -> CauseInputs:
        """What the straggler causes are read from (``tracekit.stragglers.causes.CauseInputs``)."""
        from tracekit.stragglers.causes import CauseInputs  # here: see the imports at the top
        from tracekit.stragglers.launch import launch_figures

        probes = self.probes
        clock = self.own_clock
        gpu_clock = not self.is_optable and self.clock is Clock.GPU
        projection = self.gpu.action_projection if gpu_clock and self.gpu is not None else None
        return CauseInputs(
            stragglers=self.stragglers,
            ops=self.case.ops,
            gpu_clock=gpu_clock,
            clock=clock,
            contention=self.contention,
            links=self.slow_links,
            nvml=None if probes is None else probes.nvml,
            launch=None if projection is None else launch_figures(projection),
        )

    @cached_property
    def causes(self) -> pl.DataFrame:
        """Every straggler's and slow link's causes (``tracekit.stragglers.causes.CAUSE_SCHEMA``)."""
        from tracekit.stragglers.causes import causes  # here: see the imports at the top

        return causes(self.cause_inputs)

    @property
    def absent_causes(self) -> tuple[str, ...]:
        """Which GPU causes the run could not compute, and why (``tracekit.stragglers.causes.absent_causes``)."""
        from tracekit.stragglers.causes import OPTABLE_ABSENT_CAUSES, absent_causes  # here: see the top

        return OPTABLE_ABSENT_CAUSES if self.is_optable else absent_causes(self.cause_inputs)

    @cached_property
    def slow_links(self) -> pl.DataFrame | None:
        """Communication stragglers (``tracekit.stragglers.links.LINK_SCHEMA``); None for an op-table."""
        if self.is_optable:
            return None
        from tracekit.stragglers.links import slow_links  # here: see the imports at the top

        return slow_links(self.actions, float(self.case.measured_ms().mean()), self.config.links)

    @cached_property
    def critical_path(self) -> pl.DataFrame:
        """Each step's critical path through the run replayed as recorded (``tracekit.whatif.critical``).

        Every action occupies its duration after its gap (``ReplayCase.occupied_ms``), so the path
        ends at the recorded step's end and its transfers are the gaps between its actions.
        TracekitError for an op-table.
        """
        if self.is_optable:
            raise TracekitError("an op-table replays many replicas per op: no single critical path", self.source)
        from tracekit.whatif.critical import critical_paths  # here: see the imports at the top

        case = self.case
        recorded = case.occupied_ms(case.ops["duration_ms"].to_numpy())
        return critical_paths(case, recorded, case.ops["gap_ms"].to_numpy())

    @cached_property
    def dependencies(self) -> pl.DataFrame:
        """Every cross-rank dependency of the realized actions (``tracekit.whatif.pipeline.DEPENDENCY_SCHEMA``)."""
        from tracekit.analysis.dependencies import cross_rank_dependencies  # here: see the imports at the top

        return cross_rank_dependencies(self.actions, str(self.source))

    @cached_property
    def marked_actions(self) -> pl.DataFrame:
        """The realized actions with their replay node, critical-path place and ideal span
        (``tracekit.whatif.marks.MARKED_SCHEMA``); TracekitError for an op-table."""
        nodes = self.replay.node_of_action
        if nodes is None:
            raise TracekitError("an op-table holds no realized actions to mark", self.source)
        from tracekit.whatif.marks import mark_actions  # here: see the imports at the top

        durations, occupied = self._ideal_occupancy
        return mark_actions(self.actions, self.case, nodes, self.critical_path, durations, occupied)

    @cached_property
    def _ideal_occupancy(self) -> tuple[np.ndarray, np.ndarray]:
        """Each op's ideal duration and what it occupies in the what-if's ideal replay (gaps kept or not)."""
        durations = self.ideal.per_op(self.case.ops)
        occupied = self.case.occupied_ms(durations) if self.whatif.replay == "recorded" else durations
        return durations, occupied

    @cached_property
    def whatif(self) -> WhatIf:
        """Realized against ideal replay and its attribution (``tracekit.whatif.attribution``)."""
        from tracekit.whatif.attribution import what_if  # here: see the imports at the top

        return what_if(self.case, self.config.whatif, self.ideal.per_op(self.case.ops))

    @cached_property
    def ideal_timeline(self) -> IdealTimeline:
        """The what-if's ideal replay, action by action, and its bubble (``tracekit.whatif.timeline``).

        The same replay as ``whatif.ideal_ms`` (its durations, its gaps), so the dashboard's ideal
        timeline and bubble are the what-if's ideal. TracekitError for an op-table.
        """
        node_of_action = self.replay.node_of_action
        if node_of_action is None:
            raise TracekitError("an op-table holds no actions to lay out as a timeline", self.source)
        from tracekit.whatif.timeline import replayed_actions  # here: see the imports at the top

        durations, occupied = self._ideal_occupancy
        actions = replayed_actions(self.actions, node_of_action, self.case, durations, occupied)
        per_step = step_utilization(actions)
        utilization = Utilization(per_step, rank_utilization(per_step), replica_utilization(actions, per_step))
        return IdealTimeline(actions=actions, utilization=utilization, step_ms=self.whatif.ideal_ms)

    @cached_property
    def layout(self) -> pl.DataFrame:
        """Rank -> (replica, position, stages) (``tracekit.analysis.pipelines.pipeline_positions``)."""
        return pipeline_positions(self.actions)

    @cached_property
    def stage_costs(self) -> Costs:
        """The ideal as the simulator's per-kind, per-stage costs (``tracekit.analysis.ideal.stage_costs``)."""
        from tracekit.analysis.ideal import stage_costs  # here: see the imports at the top

        return stage_costs(self.ideal, self.ideal_ops, int(self.case.ops["stage"].max()) + 1)  # type: ignore[arg-type]

    def schedule_comparison(
        self, schedules: tuple[str, ...] | None = None, microbatch_factors: tuple[float, ...] = (0.5, 1, 2, 4, 8)
    ) -> ScheduleComparison:
        """Every schedule (None: ``KNOWN_SCHEDULES``) at the run's P and ideal costs
        (``tracekit.whatif.comparison``); TracekitError when not."""
        from tracekit.whatif.comparison import compare_schedules  # here: see the imports at the top

        if schedules is None:
            schedules = __getattr__("KNOWN_SCHEDULES")
        schedule = None if self.manifest is None else self.manifest.schedule
        microbatches = self.actions["microbatch"].n_unique() if schedule is None else schedule.microbatches
        pp = self.layout["position"].n_unique()
        return compare_schedules(self.actions, pp, self.stage_costs, microbatches, schedules, microbatch_factors)

    @cached_property
    def _named(self) -> tuple[NamedComparison | None, tuple[str, ...]]:
        if self.is_optable:
            return None, ()
        from tracekit.whatif.named import compare_named  # here: see the imports at the top

        return compare_named(self.case, self.manifest, self.whatif, self.ideal)

    @property
    def named(self) -> NamedComparison | None:
        """The named schedule at ideal costs against this run (``tracekit.whatif.named``); None when unknown."""
        return self._named[0]

    @property
    def named_warnings(self) -> tuple[str, ...]:
        """Why there is no named-schedule comparison, when there is none."""
        return self._named[1]

    @cached_property
    def memory(self) -> Memory:
        """Memory per rank and step beside the schedule's ideal (``tracekit.analysis.memory_run``).

        Traces without memory events, runs without labels and op-tables give ``recorded`` False and
        a note, never zeros.
        """
        if self.loaded is None:
            return no_memory("no memory figures: an op-table or an actions frame holds no memory events")
        if not self.has_schedule_labels:
            return no_memory("no memory figures: the traces label no pipeline actions")
        return run_memory(self.run, self.labelled.actions, self.pipelines.pipeline_rank)

    @property
    def manifest(self) -> Manifest | None:
        """The collector's run.json; None for op-tables and runs captured by other tools."""
        return self.data.manifest

    @property
    def schedule_class(self) -> str | None:
        """The schedule's class (``ScheduleInterleaved1F1B``, ``DualPipe``): the manifest's, else the one given."""
        if self.manifest is not None and self.manifest.schedule is not None:
            return self.manifest.schedule.class_name
        return self.data.given_schedule_class if isinstance(self.data, ActionsSource) else None



def realized_actions(run: Run) -> pl.DataFrame:
    """The realized-actions frame of a loaded run, as ``tracekit.analyse`` gives it (``REALIZED_SCHEMA``)."""
    return RunAnalysis.of_run(run).actions

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
    per two cores, ``tracekit.perrank.engine.LocalEngine``; a ``DaskEngine`` runs them on a cluster),
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
        return RunAnalysis(source=path, config=config, data=OpTableSource(path, meta))
    if load is not None:
        return RunAnalysis(source=path, config=config, data=KinetoSource(load(path)))
    run, reductions = reduce_directory(path, config.kernel_patterns, config.pipelines, engine, on_start, on_file)
    return RunAnalysis(source=path, config=config, data=KinetoSource(run, reductions))
