"""DualPipe and DualPipeV (DeepSeek-V3 report, arXiv 2412.19437; deepseek-ai/DualPipe).

Both follow the op order of DeepSeek's reference ``DualPipe.step`` (dualpipe 1.0.0 on PyPI,
``dualpipe/dualpipe.py``), whose eight phases we replay as data: nF0, nF0F1, nB1W1F1, the main
nF0B1F1B0 of overlapped F&B pairs, nB1F1B0, nB1B0, nWB0, nW. Backward passes marked "zero bubble"
there become I with their W later (first in, first out, as ``WeightGradStore``); the others are
full B. The overlapped chunk is an ``OverlappedPair``; on the middle ranks the first main-phase
chunk runs F then B apart, as in the reference.

Numbering (shared with the collector, ``collectors/patch_dualpipe.py``; docs/schedules.md):

* ``dualpipe`` on P ranks (P even), M micro-batches (M even, M >= 2P): 2P stage ids, rank ``r``
  runs stage ``r`` and stage ``2P - 1 - r`` (ScheduleDualPipeV's V numbering). Micro-batches
  ``0 .. M/2 - 1`` flow from rank 0 to rank P-1 through stages ``0 .. P-1`` (direction 0);
  micro-batches ``M/2 .. M-1`` flow from rank P-1 to rank 0 through stages ``P .. 2P-1``
  (direction 1): two paths. Stage ``P + j`` holds the same layers as stage ``j`` (position ``j``
  along its path), so the ranks hold two parameter copies. The reference's chunk ``c`` of
  direction 1 (its phase 1 on the first half of the ranks, phase 0 on the second) is micro-batch
  ``M/2 + c``.
* ``dualpipev`` on P ranks, M micro-batches (M >= 2P): 2P stages in a V, rank ``r`` holds stages
  ``r`` and ``2P - 1 - r``; every micro-batch goes down and back (one path). DeepSeek's
  ``DualPipeV`` is the same step program with each rank playing the first half of a DualPipe on
  2P ranks: DualPipe on 2P ranks with 2M micro-batches runs, on ranks 0..P-1, DualPipeV's order
  on P ranks with M micro-batches once direction-1 stage ``4P - 1 - r`` is read as ``2P - 1 - r``
  and micro-batch ``m`` as ``m mod M`` (``fold_dualpipe``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from collectors.manifest import MicrobatchPath
from tracekit.schedule.action import Action, Kind, OverlappedPair, Step
from tracekit.schedule.model import Schedule, backward_kind
from tracekit.schedule.sizes import require, require_positive


def _step_program(
    half_rank: int,
    num_half_ranks: int,
    half_chunks: int,
    is_middle: bool,
    place: Callable[[int, int], tuple[int, int]],
) -> tuple[Step, ...]:
    """One rank's steps from the reference ``step``; ``place(phase, chunk)`` gives (stage, micro-batch)."""
    next_forward = [0, 0]
    next_backward = [0, 0]
    held: deque[tuple[int, int]] = deque()
    steps: list[Step] = []

    def forward(phase: int) -> Action:
        chunk = next_forward[phase]
        next_forward[phase] += 1
        return Action(*_with_kind(place(phase, chunk), Kind.FORWARD))

    def backward(phase: int, zero_bubble: bool = False) -> Action:
        chunk = next_backward[phase]
        next_backward[phase] += 1
        if zero_bubble:
            held.append((phase, chunk))
        return Action(*_with_kind(place(phase, chunk), backward_kind(zero_bubble)))

    def weight() -> Action:
        return Action(*_with_kind(place(*held.popleft()), Kind.BACKWARD_WEIGHT))

    outer = num_half_ranks - half_rank - 1
    for _ in range(2 * outer):  # step 1: nF0
        steps.append(forward(0))
    for _ in range(half_rank + 1):  # step 2: nF0F1
        steps += [forward(0), forward(1)]
    for _ in range(outer):  # step 3: nB1W1F1, zero bubble
        steps += [backward(1, zero_bubble=True), weight(), forward(1)]
    for i in range(half_chunks - 2 * num_half_ranks + half_rank + 1):  # step 4: nF0B1F1B0
        if i == 0 and is_middle:
            steps += [forward(0), backward(1)]  # the reference does not overlap this first pair
        else:
            steps.append(OverlappedPair(forward(0), backward(1)))
        steps.append(OverlappedPair(forward(1), backward(0)))
    for _ in range(outer):  # step 5: nB1F1B0
        steps.append(backward(1))
        steps.append(OverlappedPair(forward(1), backward(0)))
    zero_bubble = False
    for i in range(half_rank + 1):  # step 6: nB1B0, the second half zero bubble
        if i == (half_rank + 1) // 2 and half_rank % 2 == 1:
            zero_bubble = True
        steps.append(backward(1, zero_bubble))
        if i == (half_rank + 1) // 2 and half_rank % 2 == 0:
            zero_bubble = True
        steps.append(backward(0, zero_bubble))
    for _ in range(outer):  # step 7: nWB0, zero bubble
        steps += [weight(), backward(0, zero_bubble=True)]
    for _ in range(half_rank + 1):  # step 8: nW
        steps.append(weight())
    assert not held, held
    return tuple(steps)


def _with_kind(stage_microbatch: tuple[int, int], kind: Kind) -> tuple[int, Kind, int]:
    return stage_microbatch[0], kind, stage_microbatch[1]


def dualpipe(num_ranks: int, num_microbatches: int) -> Schedule:
    """DualPipe on ``num_ranks`` ranks (even): two directions, two stage copies per rank."""
    require_positive("dualpipe", pp=num_ranks, microbatches=num_microbatches)
    require(num_ranks % 2 == 0, "dualpipe", f"the pipeline ranks (pp) must be even, got {num_ranks}")
    require(
        num_microbatches % 2 == 0 and num_microbatches >= 2 * num_ranks,
        "dualpipe",
        f"micro-batches must be even and at least 2 x pp = {2 * num_ranks}, got {num_microbatches}",
    )
    half = num_microbatches // 2
    ranks: list[tuple[Step, ...]] = []
    for rank in range(num_ranks):
        second_half = rank >= num_ranks // 2

        def place(
            phase: int, chunk: int, rank: int = rank, second_half: bool = second_half
        ) -> tuple[int, int]:
            direction = phase ^ second_half
            return (rank, chunk) if direction == 0 else (2 * num_ranks - 1 - rank, half + chunk)

        half_rank = min(rank, num_ranks - 1 - rank)
        is_middle = rank in (num_ranks // 2 - 1, num_ranks // 2)
        ranks.append(_step_program(half_rank, num_ranks // 2, half, is_middle, place))
    paths = (
        MicrobatchPath(0, half, 0, num_ranks - 1),
        MicrobatchPath(half, num_microbatches, num_ranks, 2 * num_ranks - 1),
    )
    return Schedule("dualpipe", num_ranks, 2 * num_ranks, num_microbatches, tuple(ranks), paths)


def dualpipev(num_ranks: int, num_microbatches: int) -> Schedule:
    """DualPipeV on ``num_ranks`` ranks: 2 * num_ranks stages in a V, one parameter copy."""
    require_positive("dualpipev", pp=num_ranks, microbatches=num_microbatches)
    require(
        num_microbatches >= 2 * num_ranks,
        "dualpipev",
        f"micro-batches must be at least 2 x pp = {2 * num_ranks}, got {num_microbatches}",
    )
    num_stages = 2 * num_ranks
    ranks: list[tuple[Step, ...]] = []
    for rank in range(num_ranks):

        def place(phase: int, chunk: int, rank: int = rank) -> tuple[int, int]:
            return (rank if phase == 0 else num_stages - 1 - rank, chunk)

        ranks.append(_step_program(rank, num_ranks, num_microbatches, rank == num_ranks - 1, place))
    return Schedule("dualpipev", num_ranks, num_stages, num_microbatches, tuple(ranks))


def fold_dualpipe(schedule: Schedule) -> Schedule:
    """DualPipe on 2P ranks with 2M micro-batches, ranks 0..P-1 only, read in DualPipeV's numbering.

    Stage ``s`` >= 2P (direction 1 on those ranks: ``4P - 1 - r``) becomes ``s - 2P`` and
    micro-batch ``m`` becomes ``m mod M``. The result is DualPipeV on P ranks with M micro-batches
    (DeepSeek's construction of DualPipeV).
    """
    require(schedule.name == "dualpipe", "fold", f"expects a dualpipe schedule, got {schedule.name}")
    num_ranks = schedule.num_ranks // 2
    num_microbatches = schedule.num_microbatches // 2

    def fold(action: Action) -> Action:
        stage = action.stage - 2 * num_ranks if action.stage >= 2 * num_ranks else action.stage
        return Action(stage, action.kind, action.microbatch % num_microbatches)

    def fold_step(step: Step) -> Step:
        if isinstance(step, OverlappedPair):
            return OverlappedPair(fold(step.forward), fold(step.backward))
        return fold(step)

    ranks = tuple(tuple(fold_step(step) for step in schedule.steps[rank]) for rank in range(num_ranks))
    return Schedule("dualpipev", num_ranks, 2 * num_ranks, num_microbatches, ranks)
