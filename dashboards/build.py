"""From a loaded run to the dashboard page: runs the library's analyses and hands their tables to the views.

Sections, in page order, each either charts or a note saying why not:

1. timeline: the realized schedule of one step (or all) above its *ideal*: the run's own per-rank
   order replayed by the simulator (``tracekit.schedule``) with the run's median cost per kind and
   stage and no communication cost. Ranks running the same stages (data-parallel replicas) share
   one ideal pipeline.
2. utilization: bubble fraction per rank, realized against ideal, over the steps shown.
3. overlap: communication hidden under compute per rank and class, for GPU traces.
4. stragglers: slowdown against peers per rank and kind (``tracekit.stragglers``) and the what-if
   attribution (``tracekit.whatif``).
5. comparison: the simulated bubble fraction of every known schedule against micro-batches at the
   run's P, costs from the run's medians, this run marked.

``sections_from_actions`` builds 1, 2 and 5 from a realized-actions frame alone (what the
2048-rank size test feeds it); ``build_page`` adds the sections that need the whole run.

Not for: computing metrics (the analyses) or drawing (the view modules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from collectors.manifest import Manifest, RunSchedule
from dashboards.comparison import comparison_chart, from_sweep
from dashboards.export import write_images
from dashboards.overlap import from_gpu_overlap, overlap_chart
from dashboards.page import Page, Section, View, render_html
from dashboards.stragglers import attribution_chart, heatmap_scores, straggler_heatmap
from dashboards.timeline import TimelineLimits, from_realized, from_simulated, timeline_chart
from dashboards.utilization import from_simulated_ranks, from_step_utilization, mean_bubble, utilization_chart
from tracekit.analysis.utilization import step_utilization
from tracekit.errors import TracekitError
from tracekit.gpu.report import build_run_report
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.realized import realized_costs, schedule_from_realized
from tracekit.schedule.registry import GENERATORS
from tracekit.schedule.sweep import ShareCosts, sweep
from tracekit.stragglers.scoring import StragglerConfig, score_stragglers
from tracekit.stragglers.work import stage_work
from tracekit.trace.run import Run
from tracekit.whatif.attribution import what_if
from tracekit.whatif.inputs import load_case
from tracekit.whatif.summary import attribution_table


@dataclass(frozen=True)
class DashboardConfig:
    """What the dashboard draws."""

    step: int | None = None
    """Training step of the timeline and utilization; None: the first step of the run."""
    all_steps: bool = False
    """Draw every step instead of one (the ideal steps back to back)."""
    timeline: TimelineLimits = field(default_factory=TimelineLimits)
    """When the timeline turns from a Gantt chart into a heatmap."""
    straggler_threshold: float = StragglerConfig.threshold
    """Flag a rank whose straggler score is below this."""
    schedules: tuple[str, ...] = tuple(GENERATORS)
    """Schedules the comparison simulates."""
    microbatch_factors: tuple[float, ...] = (0.5, 1, 2, 4, 8)
    """Comparison micro-batch counts as multiples of P (plus the run's own count)."""

    def __post_init__(self) -> None:
        if self.step is not None and self.all_steps:
            raise TracekitError("choose one step or all steps, not both")
        if not 0 < self.straggler_threshold <= 1:
            raise TracekitError(f"straggler threshold must be in (0, 1], got {self.straggler_threshold}")
        unknown = sorted(set(self.schedules) - set(GENERATORS))
        if unknown:
            raise TracekitError(f"unknown schedules {unknown}; known: {', '.join(GENERATORS)}")


@dataclass(frozen=True)
class Ideal:
    """The ideal replay of the steps shown: its timeline frame and per-rank utilization, or why not."""

    timeline: pl.DataFrame | None
    utilization: pl.DataFrame | None
    problem: str | None


SECTION_TITLES: dict[str, str] = {
    "timeline": "Timeline: realized against ideal",
    "utilization": "Utilization and bubble per rank",
    "overlap": "Communication / compute overlap",
    "stragglers": "Stragglers and what-if attribution",
    "comparison": "Schedule comparison",
}
"""Section keys in page order, with their headings."""

PIPELINE_SECTIONS = ("timeline", "utilization", "stragglers", "comparison")
"""The sections that need the run's schedule labels."""

IDEAL_NOTE = (
    "ideal: this run's own per-rank order replayed by the simulator with the run's median duration per "
    "action kind and stage and no communication cost; each timeline starts at its own 0 ms"
)


UTILIZATION_NOTE = (
    "realized: (step window - busy) / step window, the window from the step's first start to its last end on "
    "any rank; ideal: idle / makespan of the replay; an F&B pair counts once"
)

COMPARISON_NOTE = (
    "bubble fraction = mean over ranks of idle / makespan; a schedule with v stages per rank runs each "
    "stage at the share's cost / v"
)


def _manifest_schedule(manifest: Manifest | None) -> RunSchedule | None:
    return None if manifest is None else manifest.schedule


def pipeline_layout(actions: pl.DataFrame) -> pl.DataFrame:
    """Rank -> (replica, position): ranks running the same stages are replicas of one pipeline position.

    Positions are ordered by their first stage. TracekitError when the replicas are uneven.
    """
    sets = (
        actions.group_by("rank")
        .agg(
            pl.col("stage").unique().sort().cast(pl.String()).str.join(",").alias("stages"),
            pl.col("stage").min().alias("first"),
        )
        .sort("rank")
        .with_columns(pl.int_range(pl.len()).over("stages").cast(pl.Int32()).alias("replica"))
    )
    counts = sets.group_by("stages").len()
    if counts["len"].n_unique() != 1:
        raise TracekitError(
            "ranks do not form equal pipeline replicas: "
            + ", ".join(f"stages {s} on {n} ranks" for s, n in counts.sort("stages").iter_rows())
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


def ideal_replay(actions: pl.DataFrame, steps: list[int], costs: Costs, layout: pl.DataFrame) -> Ideal:
    """Replay each shown step of replica 0 with ``costs``; every rank gets its position's figures."""
    first_replica = layout.filter(pl.col("replica") == 0).select("rank", "position")
    timelines: list[pl.DataFrame] = []
    ranks: list[pl.DataFrame] = []
    offset = 0.0
    try:
        for step in steps:
            rows = (
                actions.filter(pl.col("step") == step)
                .join(first_replica, on="rank")
                .with_columns(pl.col("position").alias("rank"))
                .drop("position")
            )
            timeline = simulate(schedule_from_realized(rows, step), costs)
            summary = summarize(timeline)
            timelines.append(from_simulated(timeline.to_frame(), offset))
            ranks.append(summary.ranks)
            offset += summary.makespan
    except TracekitError as error:
        return Ideal(None, None, f"ideal timeline unavailable: {error}")
    positions = layout.select("rank", pl.col("position").alias("at"))
    timeline_frame = (
        pl.concat(timelines)
        .rename({"rank": "at"})
        .join(positions, on="at")
        .drop("at")
        .select("timeline", "rank", "stage", "kind", "microbatch", "start_ms", "end_ms", "overlapped")
    )
    per_position = (
        pl.concat(ranks)
        .group_by("rank")
        .agg(pl.col("busy").sum(), pl.col("idle").sum())
        .with_columns((pl.col("idle") / (pl.col("busy") + pl.col("idle"))).alias("bubble_fraction"))
        .rename({"rank": "at"})
        .join(positions, on="at")
        .drop("at")
    )
    return Ideal(timeline_frame, from_simulated_ranks(per_position).sort("rank"), None)


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
    text = f"costs per rank share from this run's medians: F {f:.3g} ms, I {i:.3g} ms, W {w:.3g} ms" + (
        f", F&B {fb:.3g} ms" if not math.isnan(fb) else ""
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


def sections_from_actions(
    actions: pl.DataFrame, manifest: Manifest | None, config: DashboardConfig
) -> tuple[Section, ...]:
    """Timeline, utilization and comparison sections from realized actions (``REALIZED_SCHEMA``)."""
    steps = _steps_shown(actions, config)
    shown = actions.filter(pl.col("step").is_in(steps))
    try:
        layout = pipeline_layout(actions)
        costs = realized_costs(actions, num_stages=int(actions["stage"].max()) + 1)  # type: ignore[arg-type]
    except TracekitError as error:
        layout, costs, ideal = None, None, Ideal(None, None, f"ideal timeline unavailable: {error}")
    else:
        ideal = ideal_replay(actions, steps, costs, layout)
    why_not = () if ideal.problem is None else (ideal.problem,)

    which = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]} ({len(steps)} steps)"
    realized = from_realized(shown, int(shown["start_ns"].min()))  # type: ignore[arg-type]
    frames = [realized] if ideal.timeline is None else [realized, ideal.timeline]
    many = realized["rank"].n_unique() > config.timeline.gantt_max_ranks
    chart = timeline_chart(pl.concat(frames), f"Realized schedule and its ideal, {which}", config.timeline)
    timeline = Section(
        "timeline",
        SECTION_TITLES["timeline"],
        views=(View.of("timeline", chart, renderer="canvas" if many else "svg"),),
        notes=why_not or (IDEAL_NOTE,),
    )

    realized_util = from_step_utilization(step_utilization(shown))
    util_frames = [realized_util] if ideal.utilization is None else [realized_util, ideal.utilization]
    utilization = Section(
        "utilization",
        SECTION_TITLES["utilization"],
        views=(View.of("utilization", utilization_chart(pl.concat(util_frames))),),
        notes=(UTILIZATION_NOTE, *why_not),
    )

    if layout is None or costs is None:
        comparison = Section(
            "comparison", SECTION_TITLES["comparison"], notes=(f"comparison unavailable: {ideal.problem}",)
        )
    else:
        marks = [("realized", mean_bubble(realized_util, "realized"))]
        if ideal.utilization is not None:
            marks.append(("ideal replay", mean_bubble(ideal.utilization, "ideal")))
        pp = layout["position"].n_unique()
        comparison = _comparison_section(actions, pp, costs, marks, manifest, config)
    return timeline, utilization, comparison


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


def _run_stragglers(run: Run, config: DashboardConfig) -> tuple[Section, tuple[str, ...]]:
    """Straggler scores and what-if from the run's replay case; the case's warnings."""
    try:
        loaded = load_case(run.root, load=lambda _path: run)
    except TracekitError as error:
        problem = f"stragglers and what-if unavailable: {error}"
        return straggler_section(None, None, None, config.straggler_threshold, (problem,)), ()
    stragglers = score_stragglers(
        loaded.case,
        StragglerConfig(threshold=config.straggler_threshold),
        stage_work(loaded.manifest, str(run.root)),
        world_size=run.world_size,
    )
    result = what_if(loaded.case)
    section = straggler_section(
        heatmap_scores(stragglers.scores),
        attribution_table(result),
        result.slowdown,
        config.straggler_threshold,
    )
    return section, loaded.warnings


def _facts(run: Run, actions: pl.DataFrame | None, config: DashboardConfig) -> tuple[tuple[str, str], ...]:
    facts = [("run", str(run.root))]
    schedule = _manifest_schedule(run.manifest)
    if schedule is not None:
        facts.append(
            (
                "schedule",
                (
                    f"{schedule.name} (P = {schedule.pp_size}, "
                    f"{schedule.num_stages} stages, {schedule.microbatches} micro-batches)"
                ),
            )
        )
    facts.append(
        ("ranks", f"{len(run.ranks)} of {run.world_size}" + (" (partial run)" if run.partial else ""))
    )
    if actions is not None:
        steps = sorted(actions["step"].unique().to_list())
        facts.append(("steps", ", ".join(str(step) for step in steps)))
        shown = (
            "all steps" if config.all_steps else f"step {steps[0] if config.step is None else config.step}"
        )
        facts.append(("shown", shown))
    return tuple(facts)


def build_page(run: Run, config: DashboardConfig | None = None) -> Page:
    """The dashboard of a loaded run; TracekitError when it has neither schedule labels nor GPU events."""
    config = config or DashboardConfig()
    report = build_run_report(run)
    warnings = list(report.warnings)
    if report.pipeline is None:
        problem = "no schedule labels in this run (tracekit:…, PP:…, Forward i/Backward i)"
        sections = [Section(key, SECTION_TITLES[key], notes=(problem,)) for key in PIPELINE_SECTIONS]
        actions = None
    else:
        actions = report.pipeline.actions
        stragglers, case_warnings = _run_stragglers(run, config)
        sections = [*sections_from_actions(actions, run.manifest, config), stragglers]
        warnings += case_warnings
    if report.gpu is None:
        sections.append(
            overlap_section(
                None, "no GPU events in this run: communication / compute overlap needs GPU kernels"
            )
        )
    else:
        sections.append(overlap_section(from_gpu_overlap(report.gpu.overlap), None))
    order = list(SECTION_TITLES)
    return Page(
        title=f"tracekit: {run.root.name}",
        facts=_facts(run, actions, config),
        warnings=tuple(dict.fromkeys(warnings)),
        sections=tuple(sorted(sections, key=lambda section: order.index(section.key))),
    )


@dataclass(frozen=True)
class Written:
    """What ``write_dashboard`` wrote."""

    html: Path
    size_bytes: int
    charts: tuple[str, ...]
    """Keys of the charts on the page."""
    omitted: dict[str, str]
    """Section key -> why it has no chart."""
    images: tuple[Path, ...]
    warnings: tuple[str, ...]

    def payload(self) -> dict[str, Any]:
        """The JSON payload of ``tracekit dashboard``."""
        return {
            "out": str(self.html),
            "bytes": self.size_bytes,
            "charts": list(self.charts),
            "omitted": self.omitted,
            "images": [str(path) for path in self.images],
        }

    def summary(self) -> pl.DataFrame:
        """One row for people: where the page is, how big, what it holds."""
        return pl.DataFrame(
            {
                "out": [str(self.html)],
                "MB": [self.size_bytes / 1e6],
                "charts": [", ".join(self.charts)],
                "omitted": [", ".join(self.omitted) or "-"],
                "images": [len(self.images)],
            }
        )


def write_dashboard(
    run: Run,
    out: Path,
    config: DashboardConfig | None = None,
    png_dir: Path | None = None,
    svg_dir: Path | None = None,
) -> Written:
    """Build the page of ``run``, write it to ``out``, and each chart as PNG / SVG when asked."""
    page = build_page(run, config)
    text = render_html(page)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    images: list[Path] = []
    for directory, fmt in ((png_dir, "png"), (svg_dir, "svg")):
        if directory is not None:
            images += write_images(page, directory, (fmt,))
    return Written(
        html=out,
        size_bytes=out.stat().st_size,
        charts=tuple(view.key for view in page.views),
        omitted={section.key: " ".join(section.notes) for section in page.sections if not section.views},
        images=tuple(images),
        warnings=page.warnings,
    )
