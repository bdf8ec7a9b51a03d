"""The page's rank section, for runs too large for one Gantt row per rank: aggregates, then any rank.

From the run's one analysis (``tracekit.run_analysis``): bubble per rank and step, its distribution
over ranks, the ``k`` costliest ranks' timelines (``tracekit stragglers``' pricing), a field to open
any rank's timeline, and the critical path of the step shown. Each part that its analysis cannot
give (the replay model refused the run) is replaced by a note saying why.

Not for: drawing (``dashboards.ranks``) or the other sections (``dashboards.build``).
"""

from __future__ import annotations

import polars as pl

from dashboards.page import Section, View
from dashboards.ranks import (
    bubble_histogram,
    costliest_timelines,
    critical_path_chart,
    rank_picker,
    step_heatmap,
)
from tracekit.errors import TracekitError
from tracekit.run_analysis import RunAnalysis

TITLE = "Ranks: where to look, and any one rank"

CRITICAL_NOTE = (
    "critical path: walking back from the action that ends the replayed step last, each action's "
    "predecessor is the one it waited for (its rank's previous action, else a producer on another rank); "
    "times are the run replayed as recorded (each action's duration after its gap: a transfer or host work "
    "between actions), from the step's 0 ms; the path ends where the recorded step ends"
)


def _costliest(analysis: RunAnalysis, count: int) -> tuple[list[int], str]:
    """The ``count`` ranks whose slowness costs the step the most, and how they were chosen."""
    ranked = analysis.stragglers.ranks.sort(["saving_ms", "rank"], descending=[True, False])
    return ranked["rank"].head(count).to_list(), "step time saved with the rank at reference speed"


def rank_section(analysis: RunAnalysis, timeline: pl.DataFrame, step: int, count: int) -> Section:
    """The rank section of ``analysis``, ``timeline`` (``dashboards.timeline.TIMELINE_SCHEMA``) being step ``step``."""
    per_step = analysis.utilization.per_step.select("rank", "step", "bubble_fraction")
    per_rank = analysis.utilization.per_rank.select("rank", "bubble_fraction")
    views = [
        View.of("rank-steps", step_heatmap(per_step)),
        View.of("rank-bubbles", bubble_histogram(per_rank)),
    ]
    notes: list[str] = []
    try:
        costliest, how = _costliest(analysis, count)
        path = analysis.critical_path.filter(pl.col("step") == step)
    except TracekitError as error:
        notes.append(f"costliest ranks and critical path unavailable: {error}")
        costliest, path = [], None
    if costliest:
        title = f"The {len(costliest)} costliest ranks, step {step} (by {how})"
        views.append(View.of("rank-costliest", costliest_timelines(timeline, costliest, title)))
    first = costliest[0] if costliest else int(per_rank["rank"].min())  # type: ignore[arg-type]
    views.append(
        View.of(
            "rank-any", rank_picker(timeline, first, f"Any rank's timeline, step {step}: type a rank number")
        )
    )
    if path is not None:
        title = f"Critical path of step {step}: {path.height} actions on {path['rank'].n_unique()} ranks"
        views.append(View.of("critical-path", critical_path_chart(path, title)))
        notes.append(CRITICAL_NOTE)
    return Section("ranks", TITLE, views=tuple(views), notes=tuple(notes))
