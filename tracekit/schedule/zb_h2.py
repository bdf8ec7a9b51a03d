"""ZB-H2 (Zero Bubble paper, arXiv 2401.10241, section 3.1, Figure 3 bottom).

ZB-H2 buys a zero bubble with memory: rank ``r`` runs ``2(P - r) - 1`` forwards before its first
backward (twice 1F1B's warm-up, so up to ``2P - 1`` micro-batches in flight on rank 0), then for
each micro-batch runs I, one held-back W once it holds ``2r`` of them, and the next forward; the
held W passes fill the drain. With P=4, M=8 this is exactly the paper's figure: rank 0 runs
``F1..F7 B1 W1 F8 B2 W2 ...``, rank 3 runs ``F1 B1 ... F7 B7 W1 F8 B8 W2 ... W8``.
One stage per rank, stage = rank.
"""

from __future__ import annotations

from collections import deque

from tracekit.schedule.action import Action, Kind, Step
from tracekit.schedule.model import Schedule
from tracekit.schedule.sizes import require_positive


def _rank_steps(rank: int, num_ranks: int, num_microbatches: int) -> tuple[Step, ...]:
    warmup = min(num_microbatches, 2 * (num_ranks - rank) - 1)
    steps: list[Step] = [Action(rank, Kind.FORWARD, mb) for mb in range(warmup)]
    held: deque[int] = deque()
    next_forward = warmup
    for mb in range(num_microbatches):
        steps.append(Action(rank, Kind.BACKWARD_INPUT, mb))
        held.append(mb)
        if mb >= 2 * rank:
            steps.append(Action(rank, Kind.BACKWARD_WEIGHT, held.popleft()))
        if next_forward < num_microbatches:
            steps.append(Action(rank, Kind.FORWARD, next_forward))
            next_forward += 1
    steps.extend(Action(rank, Kind.BACKWARD_WEIGHT, mb) for mb in held)
    return tuple(steps)


def zb_h2(num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-H2 on ``num_ranks`` ranks with ``num_microbatches`` micro-batches."""
    require_positive("zb-h2", pp=num_ranks, microbatches=num_microbatches)
    steps = tuple(_rank_steps(rank, num_ranks, num_microbatches) for rank in range(num_ranks))
    return Schedule("zb-h2", num_ranks, num_ranks, num_microbatches, steps)
