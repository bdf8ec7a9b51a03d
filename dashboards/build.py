"""Page assembly: a run's ``RunAnalysis`` laid out as the dashboard's sections, in page order.

Every figure comes from the one analysis of the run (``tracekit.run_analysis``), so the page agrees
with ``tracekit report``, ``stragglers`` and ``whatif`` to the last digit. Sections, each either
charts or a note saying why not:

1. timeline: the realized schedule of one step (or all) above its *ideal*, the what-if's ideal
   replay action by action (``RunAnalysis.ideal_timeline``; the definition is
   ``tracekit.analysis.ideal.IDEAL_DEFINITION``, quoted under the chart).
2. utilization: bubble fraction per rank over *all* steps (the report's figures), realized against
   the same ideal replay of every step, measured the same way.
3. overlap: communication hidden under compute per rank and class, for GPU traces.
4. stragglers: slowdown against peers per rank and kind, flagged as ``tracekit stragglers`` flags,
   and the what-if attribution.
5. comparison: the simulated bubble fraction of every known schedule against micro-batches at the
   run's P, each at the run's ideal costs (the ideal durations; ``RunAnalysis.schedule_comparison``), with
   the realized run and its ideal marked: the named-schedule comparison, a separate reference.

Not for: computing metrics (``tracekit.run_analysis``) or drawing (the view modules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from collectors.manifest import Manifest, RunSchedule
from dashboards.comparison import comparison_chart, from_sweep
from dashboards.headline import headline
from dashboards.memory import TITLE as MEMORY_TITLE
from dashboards.memory import memory_section
from dashboards.overlap import from_gpu_overlap, overlap_chart
from dashboards.page import Page, Section, View
from dashboards.rank_section import TITLE as RANKS_TITLE
from dashboards.rank_section import rank_section
from dashboards.stragglers import attribution_chart, heatmap_scores, straggler_heatmap
from dashboards.timeline import TimelineLimits, from_realized, timeline_chart
from dashboards.utilization import from_rank_utilization, mean_bubble, utilization_chart
from tracekit.errors import TracekitError
from tracekit.present.stragglers import case_warnings
from tracekit.present.whatif import attribution_table
from tracekit.run_analysis import (
    COMPARISON_DEFINITION,
    IDEAL_DEFINITION,
    KNOWN_SCHEDULES,
    IdealTimeline,
    RunAnalysis,
)


@dataclass(frozen=True)
class DashboardConfig:
    """What the dashboard draws."""

    step: int | None = None
    """Training step of the timeline and utilization; None: the first step of the run."""
    all_steps: bool = False
    """Draw every step instead of one (the ideal steps back to back)."""
    timeline: TimelineLimits = field(default_factory=TimelineLimits)
    """When the timeline turns from a Gantt chart into a heatmap."""
    schedules: tuple[str, ...] = KNOWN_SCHEDULES
    """Schedules the comparison simulates."""
    microbatch_factors: tuple[float, ...] = (0.5, 1, 2, 4, 8)
    """Comparison micro-batch counts as multiples of P (plus the run's own count)."""
    costliest_ranks: int = 8
    """Ranks whose timelines the rank section draws (beyond ``timeline.gantt_max_ranks`` ranks)."""

    def __post_init__(self) -> None:
        if self.costliest_ranks < 1:
            raise TracekitError("costliest_ranks must be at least 1")
        if self.step is not None and self.all_steps:
            raise TracekitError("choose one step or all steps, not both")
        unknown = sorted(set(self.schedules) - set(KNOWN_SCHEDULES))
        if unknown:
            raise TracekitError(f"unknown schedules {unknown}; known: {', '.join(KNOWN_SCHEDULES)}")


SECTION_TITLES: dict[str, str] = {
    "timeline": "Timeline: realized against ideal",
    "ranks": RANKS_TITLE,
    "utilization": "Utilization and bubble per rank",
    "overlap": "Communication / compute overlap",
    "stragglers": "Stragglers and what-if attribution",
    "memory": MEMORY_TITLE,
    "comparison": "Schedule comparison",
}
"""Section keys in page order, with their headings."""

PIPELINE_SECTIONS = ("timeline", "utilization", "stragglers", "comparison")
"""The sections that need the run's schedule labels."""

IDEAL_NOTE = f"ideal: {IDEAL_DEFINITION}; each timeline starts at its own 0 ms on its own time axis"
"""The timeline's note: the one definition of the ideal (``tracekit.analysis.ideal``), quoted."""


UTILIZATION_NOTE = (
    "over all {steps} steps, as tracekit report: (step window - busy) / step window summed over steps, the "
    "window from the step's first start to its last end on any rank, for the realized run and for its ideal "
    "replay alike; an F&B pair counts once"
)


def _manifest_schedule(manifest: Manifest | None) -> RunSchedule | None:
    return None if manifest is None else manifest.schedule


def ideal_timeline(ideal: IdealTimeline, steps: list[int]) -> pl.DataFrame:
    """The ideal timeline of ``steps``, laid back to back from 0 ms (each step its ideal step time long)."""
    parts, offset_ns = [], 0
    for step, step_ms in zip(sorted(ideal.actions["step"].unique().to_list()), ideal.step_ms.tolist()):
        if step in steps:
            shown = ideal.actions.filter(pl.col("step") == step)
            parts.append(from_realized(shown, -offset_ns, timeline="ideal"))
            offset_ns += round(step_ms * 1e6)
    return pl.concat(parts)


def _steps_shown(actions: pl.DataFrame, config: DashboardConfig) -> list[int]:
    steps = sorted(actions["step"].unique().to_list())
    if config.all_steps:
        return steps
    step = steps[0] if config.step is None else config.step
    if step not in steps:
        raise TracekitError(f"step {step} is not in the run (steps {steps})")
    return [step]


def _comparison_section(
    analysis: RunAnalysis, marks: list[tuple[str, float]], config: DashboardConfig
) -> Section:
    """Every schedule at the run's P with the run's costs; ``marks`` are (label, bubble) of this run."""
    title = SECTION_TITLES["comparison"]
    schedule = _manifest_schedule(analysis.manifest)
    name = "this run" if schedule is None else schedule.name
    try:
        found = analysis.schedule_comparison(config.schedules, config.microbatch_factors)
    except TracekitError as error:
        return Section("comparison", title, notes=(f"comparison unavailable: {error}",))
    if found.rows.is_empty():
        return Section(
            "comparison", title, notes=("comparison unavailable: no schedule could be simulated", *found.skipped)
        )
    markers = pl.DataFrame(
        [(f"{name}: {label}", found.run_microbatches, bubble) for label, bubble in marks],
        schema={"label": pl.String(), "microbatches": pl.Int32(), "bubble_fraction": pl.Float64()},
        orient="row",
    )
    notes: tuple[str, ...] = (COMPARISON_DEFINITION,)
    if found.skipped:
        notes += (f"{len(found.skipped)} combinations not simulated, e.g. {found.skipped[0]}",)
    chart = comparison_chart(from_sweep(found.rows), markers, found.pp, found.costs)
    return Section("comparison", title, views=(View.of("comparison", chart),), notes=notes)


def _ideal(analysis: RunAnalysis) -> tuple[IdealTimeline | None, str | None]:
    """The what-if's ideal replay as a timeline, or why there is none."""
    try:
        return analysis.ideal_timeline, None
    except TracekitError as error:
        return None, f"ideal timeline unavailable: {error}"


def _named_stragglers(analysis: RunAnalysis) -> pl.DataFrame | None:
    """The ranks ``tracekit stragglers`` names (rank, saving_ms), for the bubble view; None when unscored."""
    try:
        return analysis.stragglers.flagged.select("rank", "saving_ms")
    except TracekitError:
        return None  # the stragglers section says why


def pipeline_sections(analysis: RunAnalysis, config: DashboardConfig) -> tuple[Section, ...]:
    """Timeline, utilization and comparison sections of a labelled run's analysis."""
    actions = analysis.actions
    every_step = sorted(actions["step"].unique().to_list())
    steps = _steps_shown(actions, config)
    shown = actions.filter(pl.col("step").is_in(steps))
    ideal, problem = _ideal(analysis)
    why_not = () if problem is None else (problem,)

    which = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]} ({len(steps)} steps)"
    realized = from_realized(shown, int(shown["start_ns"].min()))  # type: ignore[arg-type]
    frames = [realized] if ideal is None else [realized, ideal_timeline(ideal, steps)]
    many = realized["rank"].n_unique() > config.timeline.gantt_max_ranks
    clock = f"{analysis.clock.value.upper()} clock"
    chart = timeline_chart(
        pl.concat(frames), f"Realized schedule ({clock}) and its ideal, {which}", config.timeline
    )
    timeline = Section(
        "timeline",
        SECTION_TITLES["timeline"],
        views=(View.of("timeline", chart, renderer="canvas" if many else "svg"),),
        notes=why_not or (IDEAL_NOTE,),
    )

    realized_util = from_rank_utilization(analysis.utilization.per_rank)
    ideal_util = None if ideal is None else from_rank_utilization(ideal.utilization.per_rank, timeline="ideal")
    util_frames = [realized_util] if ideal_util is None else [realized_util, ideal_util]
    utilization = Section(
        "utilization",
        SECTION_TITLES["utilization"],
        views=(
            View.of("utilization", utilization_chart(pl.concat(util_frames), stragglers=_named_stragglers(analysis))),
        ),
        notes=(UTILIZATION_NOTE.format(steps=len(every_step)), *why_not),
    )

    marks = [("realized", mean_bubble(realized_util, "realized"))]
    if ideal_util is not None:
        marks.append(("ideal", mean_bubble(ideal_util, "ideal")))
    comparison = _comparison_section(analysis, marks, config)
    return timeline, utilization, comparison


def sections_from_actions(
    actions: pl.DataFrame, manifest: Manifest | None, config: DashboardConfig
) -> tuple[Section, ...]:
    """Timeline, utilization and comparison sections of a realized-actions frame (``REALIZED_SCHEMA``) alone."""
    return pipeline_sections(RunAnalysis.of_actions(actions, manifest), config)


def overlap_section(overlap: pl.DataFrame | None, problem: str | None) -> Section:
    """The overlap section from an ``OVERLAP_INPUT`` frame, or a note saying why there is none."""
    if overlap is None:
        assert problem is not None
        return Section("overlap", SECTION_TITLES["overlap"], notes=(problem,))
    return Section("overlap", SECTION_TITLES["overlap"], views=(View.of("overlap", overlap_chart(overlap)),))


def straggler_section(
    scores: pl.DataFrame | None,
    attribution: pl.DataFrame | None,
    slowdown: float | None,
    threshold: float,
    problems: tuple[str, ...] = (),
) -> Section:
    """Stragglers heatmap and what-if bars from their tables; absent ones replaced by ``problems``."""
    views = []
    if scores is not None:
        views.append(View.of("stragglers", straggler_heatmap(scores, threshold)))
    if attribution is not None and slowdown is not None:
        views.append(View.of("whatif", attribution_chart(attribution, slowdown)))
    return Section("stragglers", SECTION_TITLES["stragglers"], views=tuple(views), notes=problems)


def _stragglers_section(analysis: RunAnalysis) -> Section:
    """Straggler scores and what-if of the run, or why there are none."""
    threshold = analysis.config.stragglers.threshold
    try:
        scores, result = analysis.stragglers, analysis.whatif
    except TracekitError as error:
        problem = f"stragglers and what-if unavailable: {error}"
        return straggler_section(None, None, None, threshold, (problem,))
    return straggler_section(
        heatmap_scores(scores.scores), attribution_table(result), result.slowdown, threshold
    )


def _facts(analysis: RunAnalysis, config: DashboardConfig) -> tuple[tuple[str, str], ...]:
    facts = analysis.facts
    rows = [("run", facts.root)]
    schedule = _manifest_schedule(analysis.manifest)
    if schedule is not None:
        rows.append(
            (
                "schedule",
                (
                    f"{schedule.name} (P = {schedule.pp_size}, "
                    f"{schedule.num_stages} stages, {schedule.microbatches} micro-batches)"
                ),
            )
        )
    if analysis.loaded is not None:
        rows.append(
            (
                "ranks",
                f"{len(facts.ranks_present)} of {facts.world_size}" + (" (partial run)" if facts.partial else ""),
            )
        )
    if analysis.has_schedule_labels:
        pipelines = analysis.pipelines
        if pipelines.known:
            rows.append(("data-parallel replicas", f"{pipelines.replicas} (pipeline groups from {pipelines.source})"))
        steps = sorted(analysis.actions["step"].unique().to_list())
        rows.append(("steps", ", ".join(str(step) for step in steps)))
        shown = (
            "all steps" if config.all_steps else f"step {steps[0] if config.step is None else config.step}"
        )
        rows.append(("timeline shows", shown))
        rows.append(
            (
                "clock",
                f"{analysis.clock.value} ({'GPU kernels' if analysis.clock.value == 'gpu' else 'CPU labels'})",
            )
        )
    return tuple(rows)


def build_page(
    analysis: RunAnalysis, config: DashboardConfig | None = None, baseline: RunAnalysis | None = None
) -> Page:
    """The dashboard of a run's analysis; TracekitError when it has neither schedule labels nor GPU events.

    With ``baseline``, a last section compares the run against it (``dashboards.diff``).
    """
    config = config or DashboardConfig()
    analysis.check_analysable()
    warnings = list(analysis.run_warnings)
    if not analysis.has_schedule_labels:
        problem = "no schedule labels in this run (tracekit:…, PP:…, Forward i/Backward i)"
        sections = [Section(key, SECTION_TITLES[key], notes=(problem,)) for key in PIPELINE_SECTIONS]
    else:
        sections = [*pipeline_sections(analysis, config), _stragglers_section(analysis)]
        actions = analysis.actions
        if actions["rank"].n_unique() > config.timeline.gantt_max_ranks:
            # Too many ranks for one Gantt row each: aggregates, the costliest ranks, any rank.
            step = _steps_shown(actions, config)[0]
            shown = actions.filter(pl.col("step") == step)
            timeline = from_realized(shown, int(shown["start_ns"].min()))  # type: ignore[arg-type]
            sections.append(rank_section(analysis, timeline, step, config.costliest_ranks))
        memory = analysis.memory
        last_step = None if memory.steps.is_empty() else int(memory.steps["step"].max())  # type: ignore
        sections.append(memory_section(memory.timeline, memory.ranks, last_step, memory.notes))
        try:
            warnings += case_warnings(analysis)
        except TracekitError:
            warnings += analysis.realized.warnings
    if analysis.gpu is None:
        sections.append(
            overlap_section(
                None, "no GPU events in this run: communication / compute overlap needs GPU kernels"
            )
        )
    else:
        warnings += analysis.gpu.warnings
        sections.append(overlap_section(from_gpu_overlap(analysis.gpu.overlap), None))
    order = list(SECTION_TITLES)
    sections.sort(key=lambda section: order.index(section.key))
    if baseline is not None:
        from dashboards.diff import diff_section
        from tracekit.run_diff import RunDiff

        result = RunDiff(baseline, analysis)
        warnings += result.warnings
        sections.append(diff_section(result, config.step, config.timeline))
    return Page(
        title=f"tracekit: {Path(analysis.facts.root).name}",
        facts=_facts(analysis, config),
        warnings=tuple(dict.fromkeys(warnings)),
        sections=tuple(sections),
        headline=headline(analysis),
    )
