"""ZB-V (Zero Bubble paper, arXiv 2401.10241, section 6): two stages per rank in a V.

On P ranks there are 2P stages; rank ``r`` holds stage ``r`` (the way down) and ``2P - 1 - r``
(the way back). The order is torch's ``ScheduleZBVZeroBubble``: ``2(P - r) - 1`` forwards on the
first chunk, ``r`` alternating pairs of second- and first-chunk forwards, ``P - r`` rounds of
second-chunk F, I, W, then the steady phase (F I W on each chunk in turn), then the drain. Torch
builds the order for ``max(2P - 1, M)`` micro-batches and drops the ones past ``M``; so do we.
"""

from __future__ import annotations

from tracekit.schedule.action import Action, Kind, Step
from tracekit.schedule.model import Schedule
from tracekit.schedule.sizes import require_positive

F, I, W = Kind.FORWARD, Kind.BACKWARD_INPUT, Kind.BACKWARD_WEIGHT


def _rank_steps(rank: int, num_ranks: int, num_microbatches: int) -> tuple[Step, ...]:
    planned = max(2 * num_ranks - 1, num_microbatches)
    down, up = rank, 2 * num_ranks - 1 - rank
    count = {(down, F): 0, (up, F): 0, (down, I): 0, (up, I): 0, (down, W): 0, (up, W): 0}
    steps: list[Action] = []

    def run(stage: int, kind: Kind) -> None:
        steps.append(Action(stage, kind, count[stage, kind]))
        count[stage, kind] += 1

    for _ in range(2 * (num_ranks - rank) - 1):
        run(down, F)
    for _ in range(rank):
        run(up, F)
        run(down, F)
    for _ in range(num_ranks - rank):
        run(up, F)
        run(up, I)
        run(up, W)
    while count[up, F] < count[down, F] or count[down, F] < planned:
        if count[down, F] < planned:
            run(down, F)
        run(down, I)
        run(down, W)
        run(up, F)
        run(up, I)
        run(up, W)
    for _ in range(rank):
        run(down, I)
        run(up, I)
    for _ in range(num_ranks - rank):
        run(down, I)
        run(down, W)
    while count[up, W] < count[up, I]:
        run(up, W)
    while count[down, W] < count[down, I]:
        run(down, W)
    return tuple(action for action in steps if action.microbatch < num_microbatches)


def zbv(num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-V on ``num_ranks`` ranks (2 * num_ranks stages)."""
    require_positive("zbv", pp=num_ranks, microbatches=num_microbatches)
    steps = tuple(_rank_steps(rank, num_ranks, num_microbatches) for rank in range(num_ranks))
    return Schedule("zbv", num_ranks, 2 * num_ranks, num_microbatches, steps)
