"""Where DeepSeek's DualPipe and DualPipeV post each transfer: their step program, communication included.

Both classes (``dualpipe/dualpipe.py`` and ``dualpipe/dualpipev.py`` upstream, DualPipe also PyPI
1.0.0) queue a chunk's receives before it and its sends after it (``_recv_forward``,
``_send_backward``, ...) and post everything queued at the next ``_commit_and_wait_comm``, which
waits for all of it; every chunk (F, B or I, an F&B pair, W) starts with one, and the step ends
with one. Most sends leave at the commit of the rank's next action, but not all: on the ranks
other than the middle two, step 2 queues a forward's send only after the next forward (``nF0F1``:
``_send_forward(0)`` after ``_forward_chunk(1)``), and the middle ranks hold their last step-2
forward's send (``send=False``) and their first main-step forward's (``_send_forward(0)`` after
``_backward_chunk(1, send=False)``) for one action more. Receives are queued one action ahead in
step 2 (the next F0's, committed with F1) and step 3 (F1's, committed with W). So the program, not
the order of the actions alone, says at which commit each transfer is posted.

``commit_program`` replays ``step`` of either class with the same counters and flags as the
source and returns, per pipeline rank, its compute actions in order and the commit (as the index
of the action it precedes; the action count for the step's final commit) that posts each send and
each receive. Actions are keyed ``(kind, stage, micro-batch)``, with kind ``F``, ``B`` (a backward,
full or for inputs) or ``W``, in the collector's numbering (``collectors/patch_dualpipe.py``).

Not for: the dependency edges these give (``tracekit.whatif.pipeline``), nor the action order of
the schedule simulator (``tracekit.schedule.dualpipe``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

ActionKey = tuple[str, int, int]
"""(kind ``F``/``B``/``W``, stage, micro-batch)."""


@dataclass(frozen=True)
class RankProgram:
    """One pipeline rank's step: its compute actions in order and the commit that posts each transfer."""

    actions: tuple[ActionKey, ...]
    sends: dict[ActionKey, int]
    """Producer action -> index in ``actions`` of the action whose commit posts its send
    (``len(actions)``: the step's last commit)."""
    receives: dict[ActionKey, int]
    """Consumer action -> index in ``actions`` of the action whose commit posts its receive."""


class _Rank:
    """``DualPipe.step`` (or ``DualPipeV.step``) of one rank, its compute and communication recorded."""

    def __init__(self, rank: int, ranks: int, chunks: int, v_shaped: bool) -> None:
        self.rank, self.ranks, self.v_shaped = rank, ranks, v_shaped
        self.second_half = not v_shaped and rank >= ranks // 2
        self.half = chunks // 2
        self.f_id, self.b_id = [0, 0], [0, 0]
        self.send_f_id, self.send_b_id, self.recv_f_id, self.recv_b_id = [0, 0], [0, 0], [0, 0], [0, 0]
        self.queued: list[tuple[str, ActionKey]] = []
        self.weights: deque[ActionKey] = deque()
        self.actions: list[ActionKey] = []
        self.sends: dict[ActionKey, int] = {}
        self.receives: dict[ActionKey, int] = {}

    # --- placement (collectors/patch_dualpipe.py, ``position``) ---------------------------------

    def _direction(self, phase: int) -> int:
        return phase ^ self.second_half

    def _key(self, kind: str, direction: int, chunk: int) -> ActionKey:
        stage = self.rank if direction == 0 else 2 * self.ranks - 1 - self.rank
        microbatch = chunk if self.v_shaped or direction == 0 else self.half + chunk
        return kind, stage, microbatch

    def _first_stage(self, direction: int) -> bool:
        return (self.rank == 0 and direction == 0) or (self.rank == self.ranks - 1 and direction == 1)

    def _last_stage(self, direction: int) -> bool:
        return (self.rank == 0 and direction == 1) or (self.rank == self.ranks - 1 and direction == 0)

    # --- communication ---------------------------------------------------------------------------

    def recv_forward(self, phase: int) -> None:
        direction = self._direction(phase)
        if not self._first_stage(direction):
            self.queued.append(("recv", self._key("F", direction, self.recv_f_id[direction])))
            self.recv_f_id[direction] += 1

    def send_forward(self, phase: int) -> None:
        direction = self._direction(phase)
        if not self._last_stage(direction):
            self.queued.append(("send", self._key("F", direction, self.send_f_id[direction])))
            self.send_f_id[direction] += 1

    def recv_backward(self, phase: int) -> None:
        direction = self._direction(phase)
        if not self._last_stage(direction):
            self.queued.append(("recv", self._key("B", direction, self.recv_b_id[direction])))
            self.recv_b_id[direction] += 1

    def send_backward(self, phase: int) -> None:
        direction = self._direction(phase)
        if not self._first_stage(direction):
            self.queued.append(("send", self._key("B", direction, self.send_b_id[direction])))
            self.send_b_id[direction] += 1

    def commit(self) -> None:
        """Post what is queued: at the commit before the next compute action (or the step's end)."""
        for what, key in self.queued:
            (self.sends if what == "send" else self.receives)[key] = len(self.actions)
        self.queued = []

    # --- compute ----------------------------------------------------------------------------------

    def forward_compute(self, phase: int) -> None:
        direction = self._direction(phase)
        self.actions.append(self._key("F", direction, self.f_id[direction]))
        self.f_id[direction] += 1

    def backward_compute(self, phase: int, zero_bubble: bool = False) -> None:
        direction = self._direction(phase)
        key = self._key("B", direction, self.b_id[direction])
        self.b_id[direction] += 1
        self.actions.append(key)
        if zero_bubble:
            self.weights.append(key)

    # --- the chunks of the source ------------------------------------------------------------------

    def forward_chunk(self, phase: int, recv: bool = True, send: bool = True) -> None:
        if recv:
            self.recv_forward(phase)
        self.commit()
        self.forward_compute(phase)
        if send:
            self.send_forward(phase)

    def backward_chunk(
        self, phase: int, zero_bubble: bool = False, recv: bool = True, send: bool = True
    ) -> None:
        if recv:
            self.recv_backward(phase)
        self.commit()
        self.backward_compute(phase, zero_bubble)
        if send:
            self.send_backward(phase)

    def forward_backward_chunk(self, phase0: int, phase1: int, recv0: bool = True) -> None:
        if recv0:
            self.recv_forward(phase0)
        self.recv_backward(phase1)
        self.commit()
        self.forward_compute(phase0)
        self.backward_compute(phase1)
        self.send_forward(phase0)
        self.send_backward(phase1)

    def weight_chunk(self) -> None:
        self.commit()
        _, stage, microbatch = self.weights.popleft()
        self.actions.append(("W", stage, microbatch))

    def step(self, chunks: int) -> RankProgram:
        """``step`` of the source (DualPipe's; DualPipeV's is the first half of one on twice the ranks)."""
        if self.v_shaped:
            half_ranks, half_rank, main_chunks = self.ranks, self.rank, chunks
            middle = self.rank == self.ranks - 1
        else:
            half_ranks, main_chunks = self.ranks // 2, chunks // 2
            half_rank = min(self.rank, self.ranks - 1 - self.rank)
            middle = self.rank in (self.ranks // 2 - 1, self.ranks // 2)
        outer = half_ranks - half_rank - 1
        for _ in range(2 * outer):  # step 1: nF0
            self.forward_chunk(0)
        self.recv_forward(0)  # step 2: nF0F1
        for i in range(half_rank + 1):
            # DualPipeV's source never sends F0 here and sends it after F1 always: the same, as its
            # middle (last) rank's F0 turns back on the rank and sends nothing.
            self.forward_chunk(0, recv=False, send=middle)
            self.recv_forward(0)
            self.forward_chunk(1, send=not middle or i < half_rank)
            if not middle:
                self.send_forward(0)
        for _ in range(outer):  # step 3: nB1W1F1
            self.backward_chunk(1, zero_bubble=True)
            self.recv_forward(1)
            self.weight_chunk()
            self.forward_chunk(1, recv=False)
        for i in range(main_chunks - 2 * half_ranks + half_rank + 1):  # step 4: nF0B1F1B0
            if i == 0 and middle:
                self.forward_chunk(0, recv=False, send=False)
                self.send_forward(1)
                self.backward_chunk(1, send=False)
                self.send_forward(0)
                self.send_backward(1)
            else:
                self.forward_backward_chunk(0, 1, recv0=i > 0)
            self.forward_backward_chunk(1, 0)
        for _ in range(outer):  # step 5: nB1F1B0
            self.backward_chunk(1)
            self.forward_backward_chunk(1, 0)
        zero_bubble = False
        for i in range(half_rank + 1):  # step 6: nB1B0
            if i == (half_rank + 1) // 2 and half_rank % 2 == 1:
                zero_bubble = True
            self.backward_chunk(1, zero_bubble)
            if i == (half_rank + 1) // 2 and half_rank % 2 == 0:
                zero_bubble = True
            self.backward_chunk(0, zero_bubble)
        for _ in range(outer):  # step 7: nWB0
            self.weight_chunk()
            self.backward_chunk(0, zero_bubble=True)
        for _ in range(half_rank + 1):  # step 8: nW
            self.weight_chunk()
        assert not self.weights, self.weights
        self.commit()
        return RankProgram(tuple(self.actions), self.sends, self.receives)


def commit_program(ranks: int, chunks: int, v_shaped: bool) -> tuple[RankProgram, ...]:
    """Per pipeline rank: DualPipe's (``v_shaped``: DualPipeV's) step of ``chunks`` micro-batches."""
    return tuple(_Rank(rank, ranks, chunks, v_shaped).step(chunks) for rank in range(ranks))
