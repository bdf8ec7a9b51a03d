"""GPipe (Huang et al. 2019): every rank runs all forwards, then all full backwards.

Same per-rank order as torch's ``ScheduleGPipe``. One stage per rank, stage = rank.
"""

from __future__ import annotations

from tracekit.schedule.action import Action, Kind, Step
from tracekit.schedule.model import Schedule
from tracekit.schedule.sizes import require_positive


def gpipe(num_ranks: int, num_microbatches: int) -> Schedule:
    """GPipe on ``num_ranks`` ranks with ``num_microbatches`` micro-batches."""
    require_positive("gpipe", pp=num_ranks, microbatches=num_microbatches)
    ranks: list[tuple[Step, ...]] = []
    for rank in range(num_ranks):
        forwards = [Action(rank, Kind.FORWARD, mb) for mb in range(num_microbatches)]
        backwards = [Action(rank, Kind.FULL_BACKWARD, mb) for mb in range(num_microbatches)]
        ranks.append(tuple(forwards + backwards))
    return Schedule("gpipe", num_ranks, num_ranks, num_microbatches, tuple(ranks))
