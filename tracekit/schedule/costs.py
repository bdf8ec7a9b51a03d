"""What each action costs the timing engine: per kind, optionally per stage, plus the comm latency.

Costs are in one unit of the caller's choosing (the command line and ``realized_costs`` use
milliseconds); the engine's times come out in that unit. ``backward_input`` is the Zero Bubble
paper's T_B (backward for inputs); a full backward costs ``backward_input + backward_weight``
unless measured apart; an overlapped F&B pair costs ``overlapped`` (indexed by its forward's
stage), by default the sum of its halves. NaN means "not measured" (``realized_costs``); the
engine refuses to run an action whose cost is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tracekit.schedule.action import Action, Kind, OverlappedPair, Step
from tracekit.schedule.model import ScheduleError


def _per_stage(name: str, values: Sequence[float], num_stages: int) -> tuple[float, ...]:
    values = tuple(float(value) for value in values)
    if len(values) != num_stages:
        raise ScheduleError(f"{name}: {len(values)} per-stage costs for {num_stages} stages")
    if not all(math.isnan(value) or (math.isfinite(value) and value >= 0) for value in values):
        raise ScheduleError(f"{name}: costs must be finite and >= 0 (or NaN: not measured), got {values}")
    return values


@dataclass(frozen=True)
class Costs:
    """Per-stage action costs and the point-to-point latency between ranks."""

    forward: tuple[float, ...]
    """F, per stage."""
    backward_input: tuple[float, ...]
    """I, the backward for inputs (Zero Bubble's T_B), per stage."""
    backward_weight: tuple[float, ...]
    """W, the backward for weights, per stage."""
    full_backward: tuple[float, ...] | None = None
    """B, per stage; None means I + W."""
    overlapped: tuple[float, ...] | None = None
    """An F&B pair, per stage of its forward half; None means F + B of its halves."""
    comm: float = 0.0
    """Latency added when a dependency ran on another rank."""

    def __post_init__(self) -> None:
        stages = len(self.forward)
        for name in ("forward", "backward_input", "backward_weight", "full_backward", "overlapped"):
            values = getattr(self, name)
            if values is not None:
                object.__setattr__(self, name, _per_stage(name, values, stages))
        if not (math.isfinite(self.comm) and self.comm >= 0):
            raise ScheduleError(f"comm: latency must be finite and >= 0, got {self.comm}")

    @classmethod
    def uniform(
        cls,
        num_stages: int,
        f: float,
        b: float,
        w: float,
        fb: float | None = None,
        comm: float = 0.0,
        full_b: float | None = None,
    ) -> Costs:
        """The same costs on every stage."""
        return cls(
            forward=(f,) * num_stages,
            backward_input=(b,) * num_stages,
            backward_weight=(w,) * num_stages,
            full_backward=None if full_b is None else (full_b,) * num_stages,
            overlapped=None if fb is None else (fb,) * num_stages,
            comm=comm,
        )

    @property
    def num_stages(self) -> int:
        """Stages these costs cover."""
        return len(self.forward)

    def action(self, action: Action) -> float:
        """The cost of one action run alone."""
        stage = action.stage
        if action.kind is Kind.FORWARD:
            return self.forward[stage]
        if action.kind is Kind.BACKWARD_INPUT:
            return self.backward_input[stage]
        if action.kind is Kind.BACKWARD_WEIGHT:
            return self.backward_weight[stage]
        if self.full_backward is not None:
            return self.full_backward[stage]
        return self.backward_input[stage] + self.backward_weight[stage]

    def step(self, step: Step) -> float:
        """The cost of one step: an action, or an overlapped pair as one chunk."""
        if isinstance(step, OverlappedPair):
            if self.overlapped is not None:
                return self.overlapped[step.forward.stage]
            return self.action(step.forward) + self.action(step.backward)
        return self.action(step)
