"""Reference per-rank orders from the implementations our generators follow, for comparison.

``torch_order`` asks torch.distributed.pipelining for a schedule's ``pipeline_order``
(``_schedule_visualizer.get_schedule_ops``). ``deepseek_dualpipe_order`` runs the real
``DualPipe.step`` of DeepSeek's dualpipe package with its compute and point-to-point calls
recorded instead of run: the control flow that orders the chunks is the reference's own code;
only the tensor work, which cannot change the order, is left out (its constructor needs CUDA).
``deepseek_dualpipev_order`` does the same with upstream ``DualPipeV.step`` (../shared).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from dualpipe import DualPipe, WeightGradStore
from dualpipe import comm as dualpipe_comm
from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

from tracekit.schedule.action import Action, Kind, OverlappedPair, Step, parse_step

_COMPUTE = frozenset("FBIW")


def torch_order(name: str, pp: int, microbatches: int, chunks: int | None = None) -> list[list[str]]:
    """torch's per-rank compute actions as text, None slots and REDUCE_GRAD dropped."""
    ranks = get_schedule_ops(name, pp, microbatches, chunks)
    order = []
    for actions in ranks:
        texts = [str(action) for action in actions if action is not None]
        order.append([text for text in texts if text.endswith("OVERLAP_F_B") or _is_compute(text)])
    return order


def _is_compute(text: str) -> bool:
    try:
        parse_step(text)
    except ValueError:
        return False
    return True


class _RecordingDualPipe(DualPipe):
    """DualPipe whose chunk computations append (stage, kind, micro-batch) to ``self.recorded``."""

    def __init__(self, rank: int, num_ranks: int) -> None:
        torch.nn.Module.__init__(self)  # DualPipe.__init__ requires CUDA modules
        self.batch_dim = 0
        self.num_ranks = num_ranks
        self.rank = rank
        self.is_first_rank = rank == 0
        self.is_last_rank = rank == num_ranks - 1
        self.is_in_second_half = rank >= num_ranks // 2
        self.is_middle_rank = rank in (num_ranks // 2 - 1, num_ranks // 2)
        self.recorded: list[Step] = []

    def _place(self, phase: int, chunk: int) -> tuple[int, int]:
        direction = phase ^ self.is_in_second_half
        if direction == 0:
            return self.rank, chunk
        return 2 * self.num_ranks - 1 - self.rank, self._half_chunks + chunk

    def _take(self, counters: list[int], phase: int, kind: Kind) -> Action:
        direction = phase ^ self.is_in_second_half
        chunk = counters[direction]
        counters[direction] += 1
        stage, microbatch = self._place(phase, chunk)
        if kind is Kind.FORWARD and stage in (self.num_ranks - 1, 2 * self.num_ranks - 1):
            self.loss_chunks.append(torch.zeros(()))  # step() stacks the losses of the last stages
        return Action(stage, kind, microbatch)

    def _forward_compute_chunk(self, phase: int) -> None:
        self.recorded.append(self._take(self.current_f_chunk_id, phase, Kind.FORWARD))

    def _backward_compute_chunk(self, phase: int, enable_zb: bool = False) -> None:
        kind = Kind.BACKWARD_INPUT if enable_zb else Kind.FULL_BACKWARD
        action = self._take(self.current_b_chunk_id, phase, kind)
        if enable_zb:
            self._held.append(action)
            WeightGradStore.funcs_queue.put([])
        self.recorded.append(action)

    def _forward_backward_compute_chunk(self, phase0: int, phase1: int) -> None:
        forward = self._take(self.current_f_chunk_id, phase0, Kind.FORWARD)
        backward = self._take(self.current_b_chunk_id, phase1, Kind.FULL_BACKWARD)
        self.recorded.append(OverlappedPair(forward, backward))

    def _weight_chunk(self) -> None:
        WeightGradStore.pop()
        held = self._held.pop(0)
        self.recorded.append(Action(held.stage, Kind.BACKWARD_WEIGHT, held.microbatch))

    def _recv_forward(self, phase: int) -> None:
        return None

    def _send_forward(self, phase: int) -> None:
        return None

    def _recv_backward(self, phase: int) -> None:
        return None

    def _send_backward(self, phase: int) -> None:
        return None

    def _commit_and_wait_comm(self) -> None:
        return None

    def record_step(self, num_chunks: int) -> list[Step]:
        """Run the reference ``step`` for ``num_chunks`` micro-batches and return what it ran, in order."""
        self._half_chunks = num_chunks // 2
        self._held: list[Action] = []
        self.recorded = []
        saved = dualpipe_comm.TENSOR_SHAPES, dualpipe_comm.TENSOR_DTYPE
        dualpipe_comm.TENSOR_SHAPES, dualpipe_comm.TENSOR_DTYPE = [(1,)], torch.float32
        try:
            self.step(
                torch.zeros(num_chunks // 2, 1), num_chunks=num_chunks, criterion=lambda *_: torch.zeros(())
            )
        finally:
            dualpipe_comm.TENSOR_SHAPES, dualpipe_comm.TENSOR_DTYPE = saved
        return self.recorded


def deepseek_dualpipe_order(num_ranks: int, num_chunks: int) -> list[list[str]]:
    """Per-rank order DeepSeek's DualPipe.step runs, in tracekit's dualpipe numbering, as text."""
    return [
        [str(step) for step in _RecordingDualPipe(rank, num_ranks).record_step(num_chunks)]
        for rank in range(num_ranks)
    ]


UPSTREAM_DUALPIPE = (
    Path(__file__).resolve().parents[2].parent / "shared" / "third_party" / "dualpipe-upstream"
)
"""DeepSeek's upstream DualPipe (the only source of DualPipeV), read in place beside the checkout."""


def _upstream_dualpipev_class() -> type:
    """Upstream ``DualPipeV``, loaded from its file; it imports dualpipe.comm/utils, identical in 1.0.0."""
    spec = importlib.util.spec_from_file_location(
        "tracekit_reference_dualpipev", UPSTREAM_DUALPIPE / "dualpipe" / "dualpipev.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DualPipeV


def deepseek_dualpipev_order(num_ranks: int, num_chunks: int) -> list[list[str]]:
    """Per-rank order upstream ``DualPipeV.step`` runs (rank r: stages r and 2P-1-r), as text."""
    base = _upstream_dualpipev_class()

    class RecordingDualPipeV(base):  # type: ignore[misc, valid-type]
        """DualPipeV whose chunk computations are recorded instead of run."""

        def __init__(self, rank: int) -> None:
            torch.nn.Module.__init__(self)  # DualPipeV.__init__ requires CUDA modules
            self.batch_dim = 0
            self.num_ranks = num_ranks
            self.rank = rank
            self.is_first_rank = rank == 0
            self.is_last_rank = rank == num_ranks - 1
            self.recorded: list[Step] = []
            self.held: list[Action] = []

        def _take(self, counters: list[int], phase: int, kind: Kind) -> Action:
            chunk = counters[phase]
            counters[phase] += 1
            stage = self.rank if phase == 0 else 2 * num_ranks - 1 - self.rank
            if kind is Kind.FORWARD and stage == 2 * num_ranks - 1:
                self.loss_chunks.append(torch.zeros(()))  # step() stacks the last stage's losses
            return Action(stage, kind, chunk)

        def _forward_compute_chunk(self, phase: int) -> None:
            self.recorded.append(self._take(self.current_f_chunk_id, phase, Kind.FORWARD))

        def _backward_compute_chunk(self, phase: int, enable_zb: bool = False) -> None:
            kind = Kind.BACKWARD_INPUT if enable_zb else Kind.FULL_BACKWARD
            action = self._take(self.current_b_chunk_id, phase, kind)
            if enable_zb:
                self.held.append(action)
                WeightGradStore.funcs_queue.put([])
            self.recorded.append(action)

        def _forward_backward_compute_chunk(self, phase0: int, phase1: int) -> None:
            forward = self._take(self.current_f_chunk_id, phase0, Kind.FORWARD)
            backward = self._take(self.current_b_chunk_id, phase1, Kind.FULL_BACKWARD)
            self.recorded.append(OverlappedPair(forward, backward))

        def _weight_chunk(self) -> None:
            WeightGradStore.pop()
            held = self.held.pop(0)
            self.recorded.append(Action(held.stage, Kind.BACKWARD_WEIGHT, held.microbatch))

        def _recv_forward(self, phase: int) -> None:
            return None

        def _send_forward(self, phase: int) -> None:
            return None

        def _recv_backward(self, phase: int) -> None:
            return None

        def _send_backward(self, phase: int) -> None:
            return None

        def _commit_and_wait_comm(self) -> None:
            return None

    orders = []
    saved = dualpipe_comm.TENSOR_SHAPES, dualpipe_comm.TENSOR_DTYPE
    dualpipe_comm.TENSOR_SHAPES, dualpipe_comm.TENSOR_DTYPE = [(1,)], torch.float32
    try:
        for rank in range(num_ranks):
            pipe = RecordingDualPipeV(rank)
            pipe.step(torch.zeros(num_chunks, 1), num_chunks=num_chunks, criterion=lambda *_: torch.zeros(()))
            orders.append([str(step) for step in pipe.recorded])
    finally:
        dualpipe_comm.TENSOR_SHAPES, dualpipe_comm.TENSOR_DTYPE = saved
    return orders
