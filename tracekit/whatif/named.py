"""The gap between a run and its named schedule's prediction, split into what caused it.

Two references, each clearly named:

- the *ideal* (``tracekit.analysis.ideal.IDEAL_DEFINITION``): this run's recorded dependency
  graph replayed with every op at its ideal duration (``ideal_ms``, the what-if's ideal step
  time); ``typical_ms`` is the same replay without gaps: this run's order at the costs the
  simulator is given;
- *this schedule at ideal costs* (``predicted_ms``): the schedule simulator's
  (``tracekit.schedule``) step time for the schedule the run says it ran (manifest
  ``schedule.name``, ``pp_size``, ``microbatches``), with the same ideal durations per action kind
  and stage and no communication cost.

The gap ``measured - predicted`` ("gain lost") then splits exactly into:

- ``stragglers_ms``: realized replay - ideal replay (durations off their ideal);
- ``exposed_comm_and_rest_ms``: (measured - realized replay) + (ideal replay - ``typical_ms``):
  communication not hidden, launch gaps, unlabelled work, whichever of the two replays keeps them;
- ``order_ms``: ``typical_ms`` - prediction (the order the run really ran vs the named order, at
  the same costs and without communication; 0 when the run followed its schedule exactly: the gap
  between the two references).

Not for: runs without a manifest naming a schedule the simulator knows (the caller is told why).
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.manifest import Manifest
from tracekit.analysis.ideal import Ideal, stage_costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.model import ScheduleError
from tracekit.schedule.registry import GENERATORS, generate
from tracekit.whatif.attribution import WhatIf
from tracekit.whatif.case import ReplayCase


@dataclass(frozen=True)
class NamedComparison:
    """Measured, replayed and predicted step times (ms, means over steps) and the gap's parts."""

    schedule: str
    predicted_ms: float
    measured_ms: float
    realized_ms: float
    ideal_ms: float
    """The ideal: the what-if's ideal step time (its replay, gaps as it keeps them)."""
    typical_ms: float
    """This run's order replayed at ideal durations without gaps: the simulator's footing."""

    @property
    def gain_lost_ms(self) -> float:
        """Measured step time above the named schedule's prediction."""
        return self.measured_ms - self.predicted_ms

    @property
    def stragglers_ms(self) -> float:
        """Part of the gap due to durations off their ideal."""
        return self.realized_ms - self.ideal_ms

    @property
    def exposed_comm_and_rest_ms(self) -> float:
        """Part of the gap outside the durations: exposed communication, launch gaps, unlabelled work."""
        return (self.measured_ms - self.realized_ms) + (self.ideal_ms - self.typical_ms)

    @property
    def order_ms(self) -> float:
        """Part of the gap due to the realized order differing from the named one."""
        return self.typical_ms - self.predicted_ms


def compare_named(
    case: ReplayCase, manifest: Manifest | None, result: WhatIf, ideal: Ideal
) -> tuple[NamedComparison | None, tuple[str, ...]]:
    """The comparison, or None with the reason as a warning when it cannot be made.

    ``result`` is the what-if of ``case`` replayed with ``ideal``.
    """
    per_op = ideal.per_op(case.ops)
    schedule = None if manifest is None else manifest.schedule
    if schedule is None or schedule.name not in GENERATORS:
        reason = (
            "no named-schedule comparison: the manifest names no schedule the simulator knows "
            f"(schedule {None if schedule is None else schedule.name!r})"
        )
        return None, (reason,)
    name, pp, microbatches = schedule.name, schedule.pp_size, schedule.microbatches
    try:
        named = generate(name, pp, microbatches)
        predicted = max(simulate(named, stage_costs(ideal, case.ops, named.num_stages)).end)
    except ScheduleError as error:
        return None, (f"no named-schedule comparison: {error}",)
    return (
        NamedComparison(
            schedule=name,
            predicted_ms=float(predicted),
            measured_ms=float(result.measured_ms.mean()),
            realized_ms=float(result.realized_ms.mean()),
            ideal_ms=float(result.ideal_ms.mean()),
            typical_ms=float(case.replay_step_times(per_op).mean()),
        ),
        (),
    )
