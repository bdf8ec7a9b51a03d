"""Scale the planner's estimates by what a captured run measured (``tracekit plan --calibrate DIR``).

The run's realized actions give each kind's median milliseconds per stage
(``schedule.realized.realized_costs``). The planner estimates the same actions for the run's own
layout (the spec's model cut into the run's stages along a path, ``costs.layout``) and takes, per
kind, the median over stages of measured / estimated. Every candidate's estimate of that kind is
multiplied by it, so at the captured layout the measured costs replace the estimates and elsewhere
they correct them. The spec must describe the model the run trained; nothing here can check that.

A kind the run never ran alone borrows a neighbour's factor, and says so: I and W take B's when
the run never split its backward; an overlapped pair takes the F and B factors weighted by the
estimate when the run had no pairs. Not for: reading traces (``tracekit.trace``).
"""

from __future__ import annotations

import math
import statistics

import polars as pl

from tracekit.planner.costs import CostScale, engine_costs, layout
from tracekit.planner.spec import PlannerError, PlanSpec
from tracekit.schedule.costs import Costs
from tracekit.schedule.model import ScheduleError
from tracekit.schedule.realized import realized_costs, schedule_from_realized

_KINDS: tuple[str, ...] = ("forward", "backward_input", "backward_weight", "full_backward", "overlapped")


def _ratio(measured: tuple[float, ...] | None, estimated: tuple[float, ...] | None) -> float | None:
    if measured is None or estimated is None:
        return None
    ratios = [m / e for m, e in zip(measured, estimated) if not math.isnan(m) and e > 0]
    return statistics.median(ratios) if ratios else None


def calibration_scale(spec: PlanSpec, actions: pl.DataFrame) -> tuple[CostScale, tuple[str, ...]]:
    """Per-kind measured / estimated factors from a run's realized actions, and notes on how they were found."""
    try:
        first_step = int(actions["step"].min())  # type: ignore[arg-type]
        captured = schedule_from_realized(actions, step=first_step)
        measured = realized_costs(actions, num_stages=captured.num_stages)
    except ScheduleError as error:
        raise PlannerError(f"calibration run: the captured run cannot be read as a schedule: {error}") from None
    path_stages = captured.num_ranks * captured.stages_per_rank
    if path_stages > spec.model.layers:
        raise PlannerError(
            f"calibration run: the run has {path_stages} stages along a path but the spec's model only "
            f"{spec.model.layers} layers; describe the model the run trained"
        )
    estimated = engine_costs(spec, captured, layout(spec, path_stages))
    factors = {kind: _ratio(getattr(measured, kind), getattr(estimated, kind)) for kind in _KINDS}
    notes = [
        f"calibrated on {captured.num_ranks} ranks, {captured.num_stages} stages, {captured.num_microbatches} micro-batches"
    ]
    if factors["forward"] is None or (factors["full_backward"] is None and factors["backward_input"] is None):
        raise PlannerError(
            "calibration run: the run measured no forward or no backward action; nothing to calibrate"
        )
    full = factors["full_backward"] if factors["full_backward"] is not None else factors["backward_input"]
    for kind in ("backward_input", "backward_weight"):
        if factors[kind] is None:
            factors[kind] = full
            notes.append(f"{kind}: not run alone; using the full backward's factor")
    if factors["full_backward"] is None:
        factors["full_backward"] = full
    if factors["overlapped"] is None:
        factors["overlapped"] = _blend(estimated, factors["forward"], full)  # type: ignore[arg-type]
        notes.append("overlapped F&B: no pair in the run; using the F and B factors weighted by the estimate")
    scale = CostScale(**{kind: float(factors[kind]) for kind in _KINDS})  # type: ignore[arg-type]
    notes.append(", ".join(f"{kind} x {getattr(scale, kind):.3g}" for kind in _KINDS))
    return scale, tuple(notes)


def _blend(estimated: Costs, forward: float, backward: float) -> float:
    f = sum(estimated.forward)
    b = sum(estimated.full_backward or ())
    return (forward * f + backward * b) / (f + b)


def hardware_notes(run_on_gpu: bool, spec: PlanSpec) -> tuple[str, ...]:
    """What the planner must say when the calibration run did not run on the cluster's kind of hardware."""
    if run_on_gpu:
        return ()
    note = (
        f"the calibration run's traces hold no GPU activity: it ran on CPUs, not on the cluster's GPUs "
        f"({spec.cluster.name}); its measured costs are not the cluster's, and every time in this plan "
        "is scaled by them"
    )
    return (note,)
