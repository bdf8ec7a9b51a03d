"""One interval of live summaries judged the way a captured trace is: stragglers, their price, bubbles.

The interval's summaries become a realized-actions frame (``tracekit.live.summaries``), aligned
across hosts as a trace is (``tracekit.analysis.clock``) when the ranks sit on several, and that frame
is analysed on the one road a captured run takes (``tracekit.run_analysis.RunAnalysis.of_actions``):
the same replay case, straggler scores and their what-if price, busy and bubble time. Nothing here
scores or prices on its own.

``RANK_SCHEMA``, one row per rank of the interval:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| steps | Int64 | steps of the interval the rank reported | never null |
| step_ms | Float64 | median of the rank's own step durations, ms | never null |
| comm_ms | Float64 | median time per step waiting on pipeline communication, ms | never null |
| action_ms | Float64 | median duration of the rank's compute actions, ms | never null |
| bubble_fraction | Float64 | idle share of the steps' windows (``tracekit.analysis.utilization``) | never null |
| score | Float64 | the rank's straggler score (``tracekit.stragglers.scoring.RANK_SCHEMA``: 1 typical, below 1 slower) | the rank could not be judged |
| saving_ms | Float64 | the step time saved with the whole rank at its ideal speed (``tracekit stragglers``' price, and the alerts' figure), ms | the rank could not be judged |
| dropped | Int64 | summaries the rank had dropped by the end of the interval | never null |

Not for: deciding what persists across intervals (``tracekit.live.tracker``) or any I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from tracekit.live.summaries import StepSummary, realized_frame, stage_work_entries, step_frame
from tracekit.run_analysis import AnalysisConfig, RunAnalysis
from tracekit.stragglers.scoring import StragglerConfig
from tracekit.analysis.work import stage_work_frame
from tracekit.analysis.clock import apply_offsets, estimate_offsets

RANK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "steps": pl.Int64(),
    "step_ms": pl.Float64(),
    "comm_ms": pl.Float64(),
    "action_ms": pl.Float64(),
    "bubble_fraction": pl.Float64(),
    "score": pl.Float64(),
    "saving_ms": pl.Float64(),
    "dropped": pl.Int64(),
}


@dataclass(frozen=True)
class LiveConfig:
    """How the live aggregator judges and reacts."""

    interval_steps: int = 10
    """Steps per interval: scores and prices are computed once per interval, over its steps."""
    persist_intervals: int = 2
    """A straggler flagged in this many intervals in a row is persistent (fewer: transient)."""
    capture_steps: int = 2
    """Steps of full torch.profiler trace to capture once a straggler is persistent (0: never capture)."""
    capture_period_s: float = 600.0
    """At most one capture on anomaly per this many seconds."""
    first_step: int = 1
    """Intervals start here: step 0 carries one-off set-up work (as the default capture window skips it)."""
    stragglers: StragglerConfig = field(default_factory=StragglerConfig)
    """Thresholds of the straggler scoring, the offline analysis's own."""

    def __post_init__(self) -> None:
        if self.interval_steps < 2:
            raise ValueError("an interval needs at least 2 steps")
        if self.persist_intervals < 1:
            raise ValueError("persistence needs at least 1 interval")
        if self.capture_steps < 0 or self.capture_period_s < 0 or self.first_step < 0:
            raise ValueError("capture steps, capture period and first step must be >= 0")

    def interval_of(self, step: int) -> int | None:
        """Index of the interval step ``step`` belongs to; None before ``first_step``."""
        return None if step < self.first_step else (step - self.first_step) // self.interval_steps

    def interval_steps_of(self, index: int) -> range:
        """The steps of interval ``index``."""
        first = self.first_step + index * self.interval_steps
        return range(first, first + self.interval_steps)


@dataclass(frozen=True)
class IntervalAssessment:
    """What one interval's summaries say."""

    index: int
    steps: tuple[int, ...]
    """Steps judged: those every reporting rank summarised, none of them profiled."""
    ranks: pl.DataFrame
    """``RANK_SCHEMA``."""
    scores: pl.DataFrame
    """``tracekit.stragglers.scoring.SCORE_SCHEMA``, most harmful first."""
    step_ms: float
    """Mean step time of the interval: the wall span of a step across the ranks, ms (the step
    ``tracekit stragglers`` prices, ``Stragglers.ranks.step_ms``)."""
    warnings: tuple[str, ...]


def usable_steps(summaries: Sequence[StepSummary], ranks: set[int]) -> list[int]:
    """Steps that every one of ``ranks`` summarised, none of them while profiling."""
    by_step: dict[int, set[int]] = {}
    profiled: set[int] = set()
    for summary in summaries:
        by_step.setdefault(summary.step, set()).add(summary.rank)
        if summary.profiled:
            profiled.add(summary.step)
    return sorted(step for step, seen in by_step.items() if seen >= ranks and step not in profiled)


def flagged_stragglers(assessment: IntervalAssessment) -> list[dict]:
    """The interval's stragglers as plain alerts: rank, kind, stage(s), slower_pct, saving_ms, step_ms.

    The kind is the one the rank is named by; ``saving_ms`` is the whole rank's saving at ideal
    speed, the figure of the interval's rank table and of ``tracekit stragglers``' price.
    """
    rank_saving = dict(assessment.ranks.select("rank", "saving_ms").iter_rows())
    alerts = []
    for row in assessment.scores.filter(pl.col("flagged")).iter_rows(named=True):
        stages = [int(s) for s in row["stages"].split(",")]
        alerts.append(
            {
                "rank": row["rank"],
                "stage": stages[0] if len(stages) == 1 else stages,
                "kind": row["kind"],
                "slower_pct": round((1 / row["score"] - 1) * 100, 1),  # the kind it is named by
                "saving_ms": round(rank_saving[row["rank"]], 3),
                "step_ms": round(row["step_ms"], 3),
            }
        )
    return alerts


def assess_interval(
    index: int, summaries: Sequence[StepSummary], ranks: set[int], config: LiveConfig
) -> IntervalAssessment:
    """Judge interval ``index`` from its summaries; ``ranks`` are those expected to report."""
    steps = usable_steps(summaries, ranks)
    kept = [s for s in summaries if s.step in set(steps) and s.rank in ranks]
    warnings: list[str] = []
    actions = realized_frame(kept, warnings)
    hosts = {s.rank: s.host for s in kept}
    if len(set(hosts.values())) > 1:
        # Ranks on one host share perf_counter's clock; across hosts, align as for a trace.
        clock = estimate_offsets(actions, hosts)
        actions = apply_offsets(actions, clock.rank_offset_ns)
    source = f"live interval {index}"
    classes = {s.schedule_class for s in kept if s.schedule_class is not None}
    analysis = RunAnalysis.of_actions(
        actions,
        config=AnalysisConfig(stragglers=config.stragglers),
        source=source,
        stage_work=stage_work_frame(stage_work_entries(kept), source),
        world_size=max(ranks) + 1,
        # One schedule runs on every rank; ranks that disagree (never seen) get no peer waits.
        schedule_class=classes.pop() if len(classes) == 1 else None,
    )
    warnings.extend(analysis.replay.warnings)
    scored = analysis.stragglers
    scores = scored.scores
    per_rank_scores = scored.ranks.select("rank", "score", "saving_ms")
    own = (
        step_frame(kept)
        .group_by("rank")
        .agg(
            pl.len().cast(pl.Int64()).alias("steps"),
            pl.col("step_ms").median(),
            pl.col("comm_ms").median(),
            pl.col("dropped").max(),
        )
    )
    bubbles = analysis.utilization.per_rank.select("rank", "bubble_fraction")
    action_ms = actions.group_by("rank").agg(
        ((pl.col("end_ns") - pl.col("start_ns")).median() / 1e6).alias("action_ms")
    )
    table = (
        own.join(bubbles, on="rank", how="left")
        .join(action_ms, on="rank", how="left")
        .join(per_rank_scores, on="rank", how="left")
        .select(list(RANK_SCHEMA))
        .cast(RANK_SCHEMA)  # type: ignore[arg-type]
        .sort("rank")
    )
    return IntervalAssessment(
        index=index,
        steps=tuple(steps),
        ranks=table,
        scores=scores,
        step_ms=float(analysis.case.measured_ms().mean()),
        warnings=tuple(warnings),
    )
