"""Bubble and memory figures of a simulated (or replayed) timeline.

Definitions (also printed under the command's tables and in docs/schedules.md):

* ``makespan``: last end - first start over all ranks.
* per rank ``busy``: time running steps (an overlapped pair counts once); ``idle`` = makespan -
  busy; ``bubble_fraction`` = idle / makespan; ``span``: its last step's end - its first step's
  start.
* ``bubble_rate``: the Zero Bubble paper's (arXiv 2401.10241, section 5.3) (cost - M(F+B+W)) /
  cost, where cost is the longest rank span and M(F+B+W) the most compute one rank does with
  nothing overlapped (each pair counted as its two halves). Negative when overlapping F&B saves
  more than the bubbles cost.
* ``peak_activations``: most micro-batches whose activations a rank holds at once, from a forward's
  start to its backward-for-inputs' (B or I) end, in units of one micro-batch through one rank's
  share of the model (a stage of a v-chunk schedule counts 1/v).
* ``param_copies``: copies of the model's parameters the ranks hold together, one per micro-batch
  path (2 for DualPipe, whose two directions run over two copies of every layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from tracekit.schedule.action import Kind, OverlappedPair

if TYPE_CHECKING:
    from tracekit.schedule.engine import Timeline  # only annotated: the engine loads numpy

RANK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "busy": pl.Float64(),
    "idle": pl.Float64(),
    "bubble_fraction": pl.Float64(),
    "span": pl.Float64(),
    "peak_activations": pl.Float64(),
}
"""Per-rank figures, times in the costs' unit."""

DEFINITIONS: tuple[str, ...] = (
    "makespan = last end - first start over all ranks",
    "busy = time a rank runs steps (an F&B pair counts once); idle = makespan - busy",
    "bubble_fraction = idle / makespan",
    "span = a rank's last end - its first start",
    (
        "bubble_rate (Zero Bubble paper, sec. 5.3) = (cost - M(F+B+W)) / cost, cost = longest span, "
        "M(F+B+W) = most unoverlapped compute of one rank"
    ),
    "peak_activations = most micro-batches held at once (F start to B/I end), in rank-share units",
    "param_copies = copies of the model's parameters across the ranks (2 for DualPipe)",
)


@dataclass(frozen=True)
class Summary:
    """The figures of one timeline."""

    makespan: float
    bubble_rate: float
    param_copies: int
    ranks: pl.DataFrame
    """One row per rank, RANK_SCHEMA."""

    def to_payload(self) -> dict[str, object]:
        """The JSON shape of the ``simulate`` command (without the schedule rows)."""
        return {
            "makespan": self.makespan,
            "bubble_rate": self.bubble_rate,
            "param_copies": self.param_copies,
            "ranks": self.ranks.drop("span").to_dicts(),
        }


def _peak_held(timeline: Timeline, rank: int) -> int:
    events: list[tuple[float, int]] = []
    base = timeline.offsets[rank]
    for index, step in enumerate(timeline.schedule.steps[rank]):
        node = base + index
        for action in step.halves if isinstance(step, OverlappedPair) else (step,):
            if action.kind is Kind.FORWARD:
                events.append((timeline.start[node], 1))
            elif action.kind.is_backward:
                events.append((timeline.end[node], -1))
    events.sort()  # at equal times releases (-1) sort before acquisitions: memory freed is reusable
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def _unoverlapped_work(timeline: Timeline, rank: int) -> float:
    costs = timeline.costs
    return sum(
        sum(costs.action(action) for action in step.halves)
        if isinstance(step, OverlappedPair)
        else costs.action(step)
        for step in timeline.schedule.steps[rank]
    )


def summarize(timeline: Timeline) -> Summary:
    """Makespan, bubble figures and memory figures of ``timeline``."""
    schedule = timeline.schedule
    start, end, offsets = timeline.start, timeline.end, timeline.offsets
    first = min(start[offsets[r]] for r in range(schedule.num_ranks) if offsets[r] < offsets[r + 1])
    makespan = max(end) - first
    rows: dict[str, list] = {name: [] for name in RANK_SCHEMA}
    work = 0.0
    for rank in range(schedule.num_ranks):
        nodes = range(offsets[rank], offsets[rank + 1])
        busy = sum(end[n] - start[n] for n in nodes)
        span = end[nodes[-1]] - start[nodes[0]] if nodes else 0.0
        rows["rank"].append(rank)
        rows["busy"].append(busy)
        rows["idle"].append(makespan - busy)
        rows["bubble_fraction"].append((makespan - busy) / makespan if makespan > 0 else 0.0)
        rows["span"].append(span)
        rows["peak_activations"].append(_peak_held(timeline, rank) / schedule.stages_per_rank)
        work = max(work, _unoverlapped_work(timeline, rank))
    cost = max(rows["span"])
    return Summary(
        makespan=makespan,
        bubble_rate=(cost - work) / cost if cost > 0 else 0.0,
        param_copies=schedule.param_copies,
        ranks=pl.DataFrame(rows, schema=RANK_SCHEMA),
    )


def rank_bytes(
    params_bytes: float,
    grads_bytes: float,
    optimizer_bytes: float,
    peak_activations: float,
    saved_bytes: float,
    stages_per_rank: int,
    reserved_bytes: float,
) -> float:
    """One rank's memory, bytes: its state, plus the peak in-flight count times the mean saved bytes
    of its stages times its stages per rank, plus the reserve (the planner's formula, ``tracekit.planner.memory``)."""
    activations = peak_activations * saved_bytes * stages_per_rank
    return params_bytes + grads_bytes + optimizer_bytes + activations + reserved_bytes
