"""Every known schedule simulated at this run's P and ideal costs: the dashboard's comparison sweep.

The costs are the one ideal (``tracekit.analysis.ideal.stage_costs``) turned into one rank's share
of the model (``tracekit.schedule.sweep.ShareCosts``): per kind, the mean ideal over the stages,
times the stages a rank runs per pass. This is the *named-schedule comparison*'s family (each
textbook schedule simulated with the run's costs, no communication): a second reference, apart
from the ideal replay of the run itself.

Not for: the run's own ideal step (``tracekit.whatif.attribution``) or drawing (``dashboards``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from tracekit.errors import TracekitError
from tracekit.schedule.costs import Costs
from tracekit.schedule.sweep import SWEEP_SCHEMA, ShareCosts, sweep

COMPARISON_DEFINITION = (
    "each schedule at ideal costs (this run's ideal durations, one cost per rank share) is the second "
    "reference: it differs from this run's ideal by the run's own order and per-stage imbalance; bubble "
    "fraction = mean over ranks of idle / makespan; a schedule with v stages per rank runs each stage at the "
    "share's cost / v"
)
"""What the comparison's curves are, quoted under them."""


@dataclass(frozen=True)
class ScheduleComparison:
    """The sweep at the run's P (``SWEEP_SCHEMA`` rows), what was skipped, and the costs in words."""

    rows: pl.DataFrame
    skipped: tuple[str, ...]
    pp: int
    run_microbatches: int
    costs: str
    """The share costs used, in words (and any assumption made to get them)."""


def share_costs(costs: Costs, stages_per_rank: float) -> tuple[ShareCosts, str]:
    """One rank's share of the model from per-stage ideals: mean per stage times stages per rank.

    TracekitError when the run measured no forward, or no backward at all.
    """

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
        f"ideal costs per rank share from this run's ideal durations: F {f:.3g} ms, I {i:.3g} ms, W {w:.3g} ms"
        + (f", F&B {fb:.3g} ms" if not math.isnan(fb) else "")
    )
    return share, text + assumption + "; no communication cost"


def stages_per_pass(actions: pl.DataFrame, pp: int) -> float:
    """Stages a micro-batch's forward visits per rank: 2 for the V shapes, 1 for 1F1B and DualPipe."""
    first = actions.filter((pl.col("microbatch") == 0) & (pl.col("kind") == "F"))
    return first["stage"].n_unique() / pp


def compare_schedules(
    actions: pl.DataFrame,
    pp: int,
    costs: Costs,
    run_microbatches: int,
    schedules: Sequence[str],
    microbatch_factors: Sequence[float],
) -> ScheduleComparison:
    """Simulate ``schedules`` at P = ``pp`` for micro-batch counts ``pp x factor`` and the run's own count.

    TracekitError when the run's costs cannot make a share (``share_costs``).
    """
    share, text = share_costs(costs, stages_per_pass(actions, pp))
    counts = sorted({max(1, round(pp * factor)) for factor in microbatch_factors} | {run_microbatches})
    rows, skipped = sweep(schedules, [pp], counts, share)
    return ScheduleComparison(
        rows=rows if not rows.is_empty() else pl.DataFrame(schema=SWEEP_SCHEMA),
        skipped=skipped,
        pp=pp,
        run_microbatches=run_microbatches,
        costs=text,
    )
