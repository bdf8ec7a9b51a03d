"""The simulator's peak in-flight micro-batches for the schedule a run ran: memory's ideal.

The run's manifest names its schedule (``schedule.name``, ``pp_size``, ``microbatches`` and its
stages per rank); ``tracekit.schedule.registry`` generates it and the timing engine replays it at
the run's own median action costs (``tracekit.schedule.realized.realized_costs``), or at unit
costs (F 1, B 2, I 1, W 1) for kinds the run never ran alone; ``metrics.peak_activations`` then
gives each pipeline rank's peak in rank-share units. A run whose manifest names no schedule the
simulator knows is replayed in its own realized order (first step) instead, and says so.

Not for: measuring memory (``tracekit.analysis.memory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from collectors.manifest import Manifest
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.model import Schedule, ScheduleError
from tracekit.schedule.realized import realized_costs, schedule_from_realized
from tracekit.schedule.registry import GENERATORS, generate

_UNIT = {"forward": 1.0, "backward_input": 1.0, "backward_weight": 1.0, "full_backward": 2.0}


@dataclass(frozen=True)
class SimulatedPeaks:
    """Per pipeline rank, the simulator's peak in-flight count, and how it was found."""

    peaks: tuple[float, ...]
    """Index: pipeline rank; rank-share units (``tracekit.schedule.metrics.peak_activations``)."""
    stages_per_rank: int
    """The schedule's stages per rank: the rank-share unit."""
    source: str
    """``named <schedule>`` or ``realized order``."""


def _filled(values: tuple[float, ...] | None, unit: float) -> tuple[float, ...] | None:
    return None if values is None else tuple(unit if math.isnan(v) else v for v in values)


def _costs(actions: pl.DataFrame, num_stages: int) -> Costs:
    """The run's median costs per kind and stage, unit costs where a kind never ran."""
    measured = realized_costs(actions, num_stages=num_stages)
    return Costs(
        forward=_filled(measured.forward, _UNIT["forward"]),  # type: ignore[arg-type]
        backward_input=_filled(measured.backward_input, _UNIT["backward_input"]),  # type: ignore[arg-type]
        backward_weight=_filled(measured.backward_weight, _UNIT["backward_weight"]),  # type: ignore[arg-type]
        full_backward=_filled(measured.full_backward, _UNIT["full_backward"]),
        overlapped=None if measured.overlapped is None else _filled(measured.overlapped, math.nan),
    )


def _peaks(schedule: Schedule, actions: pl.DataFrame) -> tuple[float, ...]:
    try:
        costs = _costs(actions, schedule.num_stages)
        if costs.overlapped is not None and any(math.isnan(v) for v in costs.overlapped):
            costs = Costs(costs.forward, costs.backward_input, costs.backward_weight, costs.full_backward)
        timeline = simulate(schedule, costs)
    except ScheduleError:
        timeline = simulate(schedule, Costs.uniform(schedule.num_stages, 1.0, 1.0, 1.0))
    return tuple(summarize(timeline).ranks["peak_activations"].to_list())


def simulated_peaks(
    manifest: Manifest | None, actions: pl.DataFrame
) -> tuple[SimulatedPeaks | None, str | None]:
    """The peaks, or None with the reason; ``actions`` are one pipeline's (pipeline ranks 0..P-1)."""
    schedule = None if manifest is None else manifest.schedule
    if schedule is not None and schedule.name in GENERATORS:
        generator = GENERATORS[schedule.name]
        chunks = manifest.virtual_stages if generator.takes_chunks else None  # type: ignore[union-attr]
        try:
            named = generate(schedule.name, schedule.pp_size, schedule.microbatches, chunks)
            peaks = _peaks(named, actions)
            return SimulatedPeaks(peaks, named.stages_per_rank, f"named {schedule.name}"), None
        except ScheduleError as error:
            reason = f"the simulator cannot build {schedule.name}: {error}"
    else:
        named_as = None if schedule is None else schedule.name
        reason = f"the manifest names no schedule the simulator knows ({named_as!r})"
    try:
        first_step = int(actions["step"].min())  # type: ignore[arg-type]
        realized = schedule_from_realized(actions, step=first_step)
        return SimulatedPeaks(_peaks(realized, actions), realized.stages_per_rank, "realized order"), reason
    except (ScheduleError, TypeError) as error:
        return None, f"{reason}; the realized order cannot be replayed either: {error}"
