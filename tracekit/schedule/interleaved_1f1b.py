"""Interleaved 1F1B (Narayanan et al. 2021, "Megatron-LM", section 2.2.2) with v chunks per rank.

Rank ``r`` holds stages ``r, r + P, r + 2P, ...`` (torch's looped placement). The order is torch's
``ScheduleInterleaved1F1B``: micro-batches go in rounds of ``M // max(1, M // P)``; a rank runs
``(v - 1) * round + 2 * (P - 1 - r)`` warm-up forwards (depth first: a round on chunk 0, then the
same round on chunk 1, ...), then one forward and one backward at a time, then drains the
backwards, the backward chunks cycling from the last chunk down.
"""

from __future__ import annotations

from tracekit.schedule.action import Action, Kind, Step
from tracekit.schedule.model import Schedule
from tracekit.schedule.sizes import require, require_positive


def _rank_steps(
    rank: int, num_ranks: int, num_microbatches: int, chunks: int, per_round: int
) -> tuple[Step, ...]:
    total = chunks * num_microbatches
    warmup = min((chunks - 1) * per_round + 2 * (num_ranks - 1 - rank), total)

    def forward_stage(op: int) -> int:
        return ((op // per_round) % chunks) * num_ranks + rank

    def backward_stage(op: int) -> int:
        return (chunks - 1 - ((op - warmup) // per_round) % chunks) * num_ranks + rank

    next_forward: dict[int, int] = {}
    next_backward: dict[int, int] = {}

    def take(counter: dict[int, int], stage: int) -> int:
        counter[stage] = counter.get(stage, 0) + 1
        return counter[stage] - 1

    steps: list[Step] = []
    for op in range(warmup + total):
        if op < total:
            stage = forward_stage(op)
            steps.append(Action(stage, Kind.FORWARD, take(next_forward, stage)))
        if op >= warmup:
            stage = backward_stage(op)
            steps.append(Action(stage, Kind.FULL_BACKWARD, take(next_backward, stage)))
    return tuple(steps)


def interleaved_1f1b(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Schedule:
    """Interleaved 1F1B on ``num_ranks`` ranks, ``chunks`` stages per rank."""
    require_positive("interleaved-1f1b", pp=num_ranks, microbatches=num_microbatches, chunks=chunks)
    rounds = max(1, num_microbatches // num_ranks)
    require(
        num_microbatches % rounds == 0,
        "interleaved-1f1b",
        f"micro-batches ({num_microbatches}) must be a multiple of the rounds ({rounds} = M // P), as in torch",
    )
    per_round = num_microbatches // rounds
    steps = tuple(
        _rank_steps(rank, num_ranks, num_microbatches, chunks, per_round) for rank in range(num_ranks)
    )
    return Schedule("interleaved-1f1b", num_ranks, num_ranks * chunks, num_microbatches, steps)
