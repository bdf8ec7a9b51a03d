"""Page assembly: a run's ``RunAnalysis`` laid out as the dashboard's sections, in page order.

Every figure comes from the one analysis of the run (``tracekit.run_analysis``), so the page agrees
with ``tracekit report``, ``stragglers`` and ``whatif`` to the last digit. Sections, each either
charts or a note saying why not:

1. timeline: the realized schedule of one step (or all) above its *ideal*: the run's own per-rank
   order replayed by the simulator with every action at its ideal duration
   (``tracekit.analysis.ideal``: never a straggler's own) and no communication cost. Ranks running
   the same stages (data-parallel replicas) share one ideal pipeline.
2. utilization: bubble fraction per rank over *all* steps (the report's figures), realized against
   the ideal replay of every step.
3. overlap: communication hidden under compute per rank and class, for GPU traces.
4. stragglers: slowdown against peers per rank and kind, flagged as ``tracekit stragglers`` flags,
   and the what-if attribution.
5. comparison: the simulated bubble fraction of every known schedule against micro-batches at the
   run's P, each "at typical costs" (the ideal durations), with the realized run and its ideal marked.

Not for: computing metrics (``tracekit.run_analysis``) or drawing (the view modules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from collectors.manifest import Manifest, RunSchedule
from dashboards.comparison import comparison_chart, from_sweep
from dashboards.overlap import from_gpu_overlap, overlap_chart
from dashboards.page import Page, Section, View
from dashboards.rank_section import TITLE as RANKS_TITLE
from dashboards.rank_section import rank_section
from dashboards.stragglers import attribution_chart, heatmap_scores, straggler_heatmap
from dashboards.timeline import TimelineLimits, from_realized, from_simulated, timeline_chart
from dashboards.utilization import from_rank_utilization, from_simulated_ranks, mean_bubble, utilization_chart
from tracekit.analysis.ideal import stage_costs
from tracekit.errors import TracekitError
from tracekit.present.stragglers import case_warnings
from tracekit.present.whatif import attribution_table
from tracekit.run_analysis import RunAnalysis
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.realized import schedule_from_realized
from tracekit.schedule.registry import GENERATORS
from tracekit.schedule.sweep import ShareCosts, sweep


@dataclass(frozen=True)
class DashboardConfig:
    """What the dashboard draws."""

    step: int | None = None
    """Training step of the timeline and utilization; None: the first step of the run."""
    all_steps: bool = False
    """Draw every step instead of one (the ideal steps back to back)."""
    timeline: TimelineLimits = field(default_factory=TimelineLimits)
    """When the timeline turns from a Gantt chart into a heatmap."""
    schedules: tuple[str, ...] = tuple(GENERATORS)
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
        unknown = sorted(set(self.schedules) - set(GENERATORS))
        if unknown:
            raise TracekitError(f"unknown schedules {unknown}; known: {', '.join(GENERATORS)}")


@dataclass(frozen=True)
class IdealReplay:
    """The ideal replay of every step: per-step timeline frames and per-rank utilization, or why not."""

    timelines: dict[int, pl.DataFrame] | None
    """Step -> timeline frame (``dashboards.timeline`` input, from 0 ms); None when unavailable."""
    utilization: pl.DataFrame | None
    """Per rank over all steps (``UTILIZATION_SCHEMA``); None when unavailable."""
    problem: str | None


SECTION_TITLES: dict[str, str] = {
    "timeline": "Timeline: realized against ideal",
    "ranks": RANKS_TITLE,
    "utilization": "Utilization and bubble per rank",
    "overlap": "Communication / compute overlap",
    "stragglers": "Stragglers and what-if attribution",
    "comparison": "Schedule comparison",
}
"""Section keys in page order, with their headings."""

PIPELINE_SECTIONS = ("timeline", "utilization", "stragglers", "comparison")
"""The sections that need the run's schedule labels."""

IDEAL_NOTE = (
    "ideal: this run's own per-rank order replayed by the simulator with every action at its ideal duration "
    "(the median of the other ranks doing the same work, never the action's own rank) and no communication "
    "cost; each timeline starts at its own 0 ms"
)


UTILIZATION_NOTE = (
    "over all {steps} steps, as tracekit report: realized: (step window - busy) / step window summed over "
    "steps, the window from the step's first start to its last end on any rank; ideal: idle / makespan of the "
    "ideal replay of every step; an F&B pair counts once"
)

COMPARISON_NOTE = (
    "each schedule at typical costs (this run's ideal durations, one cost per rank share) is the second "
    "reference: it differs from the ideal marked here by the run's own order and per-stage imbalance; bubble "
    "fraction = mean over ranks of idle / makespan; a schedule with v stages per rank runs each stage at the "
    "share's cost / v"
)


def _manifest_schedule(manifest: Manifest | None) -> RunSchedule | None:
    return None if manifest is None else manifest.schedule


def pipeline_layout(actions: pl.DataFrame) -> pl.DataFrame:
    """Rank -> (replica, position): the actions' replica; ranks running the same stages share a position.

    Positions are ordered by their first stage. TracekitError when the replicas are uneven.
    """
    sets = (
        actions.group_by("rank")
        .agg(
            pl.col("replica").first(),
            pl.col("stage").unique().sort().cast(pl.String()).str.join(",").alias("stages"),
            pl.col("stage").min().alias("first"),
        )
        .sort("rank")
    )
    counts = sets.group_by("stages").len()
    if counts["len"].n_unique() != 1:
        raise TracekitError(
            "ranks do not form equal pipeline replicas: "
            + ", ".join(f"stages {s} on {n} ranks" for s, n in counts.sort("stages").iter_rows())
        )
    doubled = sets.group_by("replica", "stages").len().filter(pl.col("len") > 1).sort("replica", "stages")
    if not doubled.is_empty():
        replica, stages, count = doubled.row(0)
        raise TracekitError(
            f"{count} ranks of replica {replica} run stages {stages}: pipeline groups unknown"
        )
    positions = (
        sets.select("stages", "first")
        .unique()
        .sort("first")
        .with_row_index("position")
        .with_columns(pl.col("position").cast(pl.Int32()))
    )
    return (
        sets.join(positions.select("stages", "position"), on="stages")
        .select("rank", "replica", "position", "stages")
        .sort("rank")
    )


def ideal_replay(actions: pl.DataFrame, steps: list[int], costs: Costs, layout: pl.DataFrame) -> IdealReplay:
    """Replay each of ``steps`` of replica 0 with ``costs``; every rank gets its position's figures."""
    first_replica = layout.filter(pl.col("replica") == 0).select("rank", "position")
    positions = layout.select("rank", pl.col("position").alias("at"))
    timelines: dict[int, pl.DataFrame] = {}
    ranks: list[pl.DataFrame] = []
    try:
        for step in steps:
            rows = (
                actions.filter(pl.col("step") == step)
                .join(first_replica, on="rank")
                .with_columns(pl.col("position").alias("rank"))
                .drop("position")
            )
            timeline = simulate(schedule_from_realized(rows, step), costs)
            timelines[step] = timeline.to_frame().rename({"rank": "at"}).join(positions, on="at").drop("at")
            ranks.append(summarize(timeline).ranks)
    except TracekitError as error:
        return IdealReplay(None, None, f"ideal timeline unavailable: {error}")
    per_position = (
        pl.concat(ranks)
        .group_by("rank")
        .agg(pl.col("busy").sum(), pl.col("idle").sum())
        .with_columns((pl.col("idle") / (pl.col("busy") + pl.col("idle"))).alias("bubble_fraction"))
        .rename({"rank": "at"})
        .join(positions, on="at")
        .drop("at")
    )
    return IdealReplay(timelines, from_simulated_ranks(per_position).sort("rank"), None)


def ideal_timeline(ideal: IdealReplay, steps: list[int]) -> pl.DataFrame | None:
    """The ideal timeline of ``steps``, laid back to back from 0 ms."""
    if ideal.timelines is None:
        return None
    parts, offset = [], 0.0
    for step in steps:
        frame = ideal.timelines[step]
        parts.append(from_simulated(frame, offset))
        offset += float(frame["end"].max())  # type: ignore[arg-type]
    return pl.concat(parts).select(
        "timeline", "rank", "stage", "kind", "microbatch", "start_ms", "end_ms", "overlapped"
    )


def _steps_shown(actions: pl.DataFrame, config: DashboardConfig) -> list[int]:
    steps = sorted(actions["step"].unique().to_list())
    if config.all_steps:
        return steps
    step = steps[0] if config.step is None else config.step
    if step not in steps:
        raise TracekitError(f"step {step} is not in the run (steps {steps})")
    return [step]


def _share_costs(costs: Costs, stages_per_rank: float) -> tuple[ShareCosts, str]:
    """One rank's share of the model from per-stage medians: mean per stage times stages per rank."""

    def mean(values: tuple[float, ...] | None) -> float:
        measured = [value for value in values or () if not math.isnan(value)]
        return sum(measured) / len(measured) * stages_per_rank if measured else math.nan

    f, i, w, b, fb = (
        mean(costs.forward),
        mean(costs.backward_input),
        mean(costs.backward_weight),
        mean(costs.full_backward),
        mean(costs.overlapped),
    )
    assumption = ""
    if math.isnan(i) or math.isnan(w):
        if math.isnan(b):
            raise TracekitError("the run measured no backward (B, or I and W) to cost the comparison")
        # Zero Bubble's schedules need I and W apart; a run with full backwards only is split evenly.
        i = w = b / 2
        assumption = "; B split evenly into I and W (the run measured full backwards only)"
    if math.isnan(f):
        raise TracekitError("the run measured no forward to cost the comparison")
    share = ShareCosts(f=f, b=i, w=w, fb=None if math.isnan(fb) else fb)
    text = (
        f"typical costs per rank share from this run's ideal durations: F {f:.3g} ms, I {i:.3g} ms, W {w:.3g} ms"
        + (f", F&B {fb:.3g} ms" if not math.isnan(fb) else "")
    )
    return share, text + assumption + "; no communication cost"


def _stages_per_pass(actions: pl.DataFrame, pp: int) -> float:
    """Stages a micro-batch's forward visits per rank: 2 for the V shapes, 1 for 1F1B and DualPipe."""
    first = actions.filter((pl.col("microbatch") == 0) & (pl.col("kind") == "F"))
    return first["stage"].n_unique() / pp


def _comparison_section(
    actions: pl.DataFrame,
    pp: int,
    costs: Costs,
    marks: list[tuple[str, float]],
    manifest: Manifest | None,
    config: DashboardConfig,
) -> Section:
    """Sweep every schedule at the run's P with the run's costs; ``marks`` are (label, bubble) of this run."""
    title = SECTION_TITLES["comparison"]
    schedule = _manifest_schedule(manifest)
    name = "this run" if schedule is None else schedule.name
    run_microbatches = actions["microbatch"].n_unique() if schedule is None else schedule.microbatches
    try:
        share, subtitle = _share_costs(costs, _stages_per_pass(actions, pp))
    except TracekitError as error:
        return Section("comparison", title, notes=(f"comparison unavailable: {error}",))
    counts = sorted({max(1, round(pp * factor)) for factor in config.microbatch_factors} | {run_microbatches})
    rows, skipped = sweep(config.schedules, [pp], counts, share)
    if rows.is_empty():
        return Section(
            "comparison", title, notes=("comparison unavailable: no schedule could be simulated", *skipped)
        )
    markers = pl.DataFrame(
        [(f"{name}: {label}", run_microbatches, bubble) for label, bubble in marks],
        schema={"label": pl.String(), "microbatches": pl.Int32(), "bubble_fraction": pl.Float64()},
        orient="row",
    )
    notes: tuple[str, ...] = (COMPARISON_NOTE,)
    if skipped:
        notes += (f"{len(skipped)} combinations not simulated, e.g. {skipped[0]}",)
    chart = comparison_chart(from_sweep(rows), markers, pp, subtitle)
    return Section("comparison", title, views=(View.of("comparison", chart),), notes=notes)


def _ideal_costs(analysis: RunAnalysis) -> tuple[pl.DataFrame | None, Costs | None, str | None]:
    """The pipeline layout and the ideal as per-stage costs, or why not."""
    actions = analysis.actions
    try:
        layout = pipeline_layout(actions)
        costs = stage_costs(analysis.ideal, analysis.ideal_ops, int(actions["stage"].max()) + 1)  # type: ignore[arg-type]
    except TracekitError as error:
        return None, None, f"ideal timeline unavailable: {error}"
    return layout, costs, None


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
    layout, costs, problem = _ideal_costs(analysis)
    if layout is None or costs is None:
        ideal = IdealReplay(None, None, problem)
    else:
        ideal = ideal_replay(actions, every_step, costs, layout)
    why_not = () if ideal.problem is None else (ideal.problem,)

    which = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]} ({len(steps)} steps)"
    realized = from_realized(shown, int(shown["start_ns"].min()))  # type: ignore[arg-type]
    ideal_frame = ideal_timeline(ideal, steps)
    frames = [realized] if ideal_frame is None else [realized, ideal_frame]
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
    util_frames = [realized_util] if ideal.utilization is None else [realized_util, ideal.utilization]
    utilization = Section(
        "utilization",
        SECTION_TITLES["utilization"],
        views=(
            View.of("utilization", utilization_chart(pl.concat(util_frames), stragglers=_named_stragglers(analysis))),
        ),
        notes=(UTILIZATION_NOTE.format(steps=len(every_step)), *why_not),
    )

    if layout is None or costs is None:
        comparison = Section(
            "comparison", SECTION_TITLES["comparison"], notes=(f"comparison unavailable: {problem}",)
        )
    else:
        marks = [("realized", mean_bubble(realized_util, "realized"))]
        if ideal.utilization is not None:
            marks.append(("ideal", mean_bubble(ideal.utilization, "ideal")))
        pp = layout["position"].n_unique()
        comparison = _comparison_section(actions, pp, costs, marks, analysis.manifest, config)
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
    )
