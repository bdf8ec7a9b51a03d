"""1F1B (PipeDream-Flush; Narayanan et al. 2021), with the backward whole or split (ZB-H1).

Rank ``r`` runs ``P - 1 - r`` warm-up forwards, then alternates one forward and one backward, then
drains the remaining backwards: torch's ``Schedule1F1B`` order. ZB-H1 (Zero Bubble paper,
arXiv 2401.10241, section 3.1, Figure 3 top) is the same order with the backward split into I
and W, where rank ``r`` holds back its first ``r`` weight passes and runs the held ones after
its last I: the form torch's ``_get_1f1b_rank_ops(enable_zero_bubble=True)`` gives with one
stage per rank. One stage per rank, stage = rank.
"""

from __future__ import annotations

from collections import deque

from tracekit.schedule.action import Action, Kind, Step
from tracekit.schedule.model import Schedule, backward_kind
from tracekit.schedule.sizes import require_positive


def _rank_steps(rank: int, num_ranks: int, num_microbatches: int, split: bool) -> tuple[Step, ...]:
    warmup = min(num_microbatches, num_ranks - 1 - rank)
    backward = backward_kind(split)
    steps: list[Step] = [Action(rank, Kind.FORWARD, mb) for mb in range(warmup)]
    pending_weights: deque[int] = deque()
    for mb in range(num_microbatches):
        if warmup + mb < num_microbatches:
            steps.append(Action(rank, Kind.FORWARD, warmup + mb))
        steps.append(Action(rank, backward, mb))
        if split:
            pending_weights.append(mb)
            # ZB-H1: rank r defers its first r W passes into the drain's bubbles.
            if mb >= rank:
                steps.append(Action(rank, Kind.BACKWARD_WEIGHT, pending_weights.popleft()))
    steps.extend(Action(rank, Kind.BACKWARD_WEIGHT, mb) for mb in pending_weights)
    return tuple(steps)


def one_f_one_b(num_ranks: int, num_microbatches: int) -> Schedule:
    """1F1B with full backwards."""
    require_positive("1f1b", pp=num_ranks, microbatches=num_microbatches)
    steps = tuple(_rank_steps(rank, num_ranks, num_microbatches, split=False) for rank in range(num_ranks))
    return Schedule("1f1b", num_ranks, num_ranks, num_microbatches, steps)


def zb_h1(num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-H1: 1F1B's order and memory, with W passes moved into the drain's bubbles."""
    require_positive("zb-h1", pp=num_ranks, microbatches=num_microbatches)
    steps = tuple(_rank_steps(rank, num_ranks, num_microbatches, split=True) for rank in range(num_ranks))
    return Schedule("zb-h1", num_ranks, num_ranks, num_microbatches, steps)
