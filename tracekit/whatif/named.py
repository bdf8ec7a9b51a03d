"""The gap between a run and its named schedule's prediction, split into what caused it.

The prediction is the schedule simulator's (``tracekit.schedule``) step time for the schedule the
run says it ran (manifest ``schedule.name``, ``pp_size``, ``microbatches``), driven by the run's
own median cost per action kind (over all ranks, stages and steps: one straggler does not move
it), with no communication cost. The same medians drive one more replay of the realized
dependency graph (``typical_ms``). The gap ``measured - predicted`` ("gain lost") then splits
exactly into:

- ``stragglers_ms``: realized replay - typical replay (compute durations off their median);
- ``exposed_comm_and_rest_ms``: measured - realized replay (communication not hidden, launch gaps,
  unlabelled work: everything the compute-only replay does not contain);
- ``order_ms``: typical replay - prediction (the order the run really ran vs the named order, at
  the same costs; 0 when the run followed its schedule).

Not for: runs without a manifest naming a schedule the simulator knows (the caller is told why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from collectors.manifest import Manifest
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.model import ScheduleError
from tracekit.schedule.registry import GENERATORS, generate
from tracekit.whatif.attribution import WhatIf
from tracekit.whatif.case import ReplayCase
from tracekit.whatif.pipeline import PAIR_KIND


@dataclass(frozen=True)
class NamedComparison:
    """Measured, replayed and predicted step times (ms, means over steps) and the gap's parts."""

    schedule: str
    predicted_ms: float
    measured_ms: float
    realized_ms: float
    typical_ms: float

    @property
    def gain_lost_ms(self) -> float:
        """Measured step time above the named schedule's prediction."""
        return self.measured_ms - self.predicted_ms

    @property
    def stragglers_ms(self) -> float:
        """Part of the gap due to compute durations off their median."""
        return self.realized_ms - self.typical_ms

    @property
    def exposed_comm_and_rest_ms(self) -> float:
        """Part of the gap outside the compute-only replay."""
        return self.measured_ms - self.realized_ms

    @property
    def order_ms(self) -> float:
        """Part of the gap due to the realized order differing from the named one."""
        return self.typical_ms - self.predicted_ms

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {
            "schedule": self.schedule,
            "predicted_ms": self.predicted_ms,
            "measured_ms": self.measured_ms,
            "gain_lost_ms": self.gain_lost_ms,
            "stragglers_ms": self.stragglers_ms,
            "exposed_comm_and_rest_ms": self.exposed_comm_and_rest_ms,
            "order_ms": self.order_ms,
        }


def median_costs(case: ReplayCase) -> dict[str, float]:
    """Median duration (ms) per action kind over the whole run."""
    medians = case.ops.group_by("optype").agg(pl.col("duration_ms").median())
    return dict(medians.iter_rows())  # type: ignore[arg-type]


def _simulator_costs(medians: dict[str, float], num_stages: int) -> Costs:
    def per_stage(kind: str) -> tuple[float, ...]:
        return (medians.get(kind, math.nan),) * num_stages

    return Costs(
        forward=per_stage("F"),
        backward_input=per_stage("I"),
        backward_weight=per_stage("W"),
        full_backward=per_stage("B") if "B" in medians else None,
        overlapped=per_stage(PAIR_KIND) if PAIR_KIND in medians else None,
    )


def compare_named(
    case: ReplayCase, manifest: Manifest | None, result: WhatIf
) -> tuple[NamedComparison | None, tuple[str, ...]]:
    """The comparison, or None with the reason as a warning when it cannot be made."""
    schedule = None if manifest is None else manifest.schedule
    if schedule is None or schedule.name not in GENERATORS:
        reason = (
            "no named-schedule comparison: the manifest names no schedule the simulator knows "
            f"(schedule {None if schedule is None else schedule.name!r})"
        )
        return None, (reason,)
    name, pp, microbatches = schedule.name, schedule.pp_size, schedule.microbatches
    medians = median_costs(case)
    try:
        named = generate(name, pp, microbatches)
        predicted = max(simulate(named, _simulator_costs(medians, named.num_stages)).end)
    except ScheduleError as error:
        return None, (f"no named-schedule comparison: {error}",)
    typical = case.ops["optype"].replace_strict(medians, return_dtype=pl.Float64()).to_numpy()
    return (
        NamedComparison(
            schedule=name,
            predicted_ms=float(predicted),
            measured_ms=float(result.measured_ms.mean()),
            realized_ms=float(result.realized_ms.mean()),
            typical_ms=float(np.mean(case.replay_step_times(typical))),
        ),
        (),
    )
