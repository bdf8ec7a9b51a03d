"""Label DeepSeek's DualPipe (PyPI ``dualpipe``, class ``dualpipe.DualPipe``), which labels nothing itself.

Stage and micro-batch numbering (docs/labels.md, "DualPipe numbering"): on P pipeline ranks,
DualPipe runs two directions. Direction 0 enters at pp rank 0 and runs through ranks 0..P-1;
direction 1 enters at pp rank P-1 and runs through ranks P-1..0. Stage = position along the
micro-batch's path, in ScheduleDualPipeV's V numbering: pp rank r runs stage r (direction 0) and
stage 2P-1-r (direction 1), so direction 1 occupies stages P..2P-1. Micro-batch = DualPipe's chunk
id in its direction, plus num_chunks/2 for direction 1, so (stage, micro-batch) is unique and
micro-batches 0..num_chunks/2-1 pass stages 0..P-1 while the rest pass stages P..2P-1.

Wrapped methods (DualPipe's "phase" argument is relative: ranks in the second half swap them,
hence the ``^ is_in_second_half`` the source also applies):

- ``_forward_compute_chunk`` → F; ``_backward_compute_chunk`` → I when ``enable_zb`` (the weight
  gradient is deferred to WeightGradStore), else B; ``_weight_chunk`` → W of the oldest pending I
  (WeightGradStore is a FIFO); the p2p wait ``_weight_chunk`` starts with is labelled apart;
- ``_forward_backward_compute_chunk`` → the pair; without the module's own
  ``overlaped_forward_backward`` its halves run one after the other and carry their own labels;
  with it, the halves interleave inside one user call and only the pair is labelled;
- ``_commit_and_wait_comm`` → ``tracekit:comm:{send,recv,sendrecv}``;
- ``step`` → a training step.

Not for DualPipeV (not in dualpipe 1.0.0; torch's ScheduleDualPipeV is in ``patch_torch``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import Any

from collectors import capture
from collectors.files import report
from collectors.hooks import wrap_attribute
from collectors.manifest import MicrobatchPath, ScheduleInfo
from collectors.patch_torch import p2p_direction
from collectors.work import stage_work

STAGE_NUMBERING = (
    "dualpipe-v: pp rank r runs stage r (direction 0) and stage 2P-1-r (direction 1); "
    "direction-1 micro-batches are numbered from num_chunks/2"
)


def position(pipe: Any, phase: int, chunk_counters: list[int]) -> tuple[int, int]:
    """(stage, micro-batch) of the next chunk DualPipe runs for relative ``phase``, per STAGE_NUMBERING."""
    direction = phase ^ pipe.is_in_second_half
    chunk = chunk_counters[direction]
    if direction == 0:
        return pipe.rank, chunk
    return 2 * pipe.num_ranks - 1 - pipe.rank, pipe._tracekit_half_chunks + chunk


def describe(pipe: Any, num_chunks: int) -> ScheduleInfo:
    """What ``pipe`` (a DualPipe on this rank) runs in a step of ``num_chunks`` micro-batches."""
    ranks, half = pipe.num_ranks, num_chunks // 2
    return ScheduleInfo(
        class_name=type(pipe).__name__,
        name="dualpipe",
        pp_size=ranks,
        num_stages=2 * ranks,
        microbatches=num_chunks,
        stages=(pipe.rank, 2 * ranks - 1 - pipe.rank),
        paths=(MicrobatchPath(0, half, 0, ranks - 1), MicrobatchPath(half, num_chunks, ranks, 2 * ranks - 1)),
        stage_numbering=STAGE_NUMBERING,
        # module[phase] runs the stage of that relative phase (see ``position``).
        stage_work=tuple(
            work
            for work in (
                stage_work(position(pipe, phase, [0, 0])[0], module)
                for phase, module in enumerate(getattr(pipe, "module", ()))
            )
            if work is not None
        ),
    )


def _step(original: Callable[..., Any]) -> Callable[..., Any]:
    def step(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        recorder = capture.current()
        if recorder is None:
            return original(self, *inputs, **kwargs)
        num_chunks = kwargs.get("num_chunks", 0)
        self._tracekit_half_chunks = num_chunks // 2
        self._tracekit_pending_weights = deque()
        recorder.begin_step(lambda: describe(self, num_chunks))
        try:
            return original(self, *inputs, **kwargs)
        finally:
            recorder.end_step()

    return step


def _forward(original: Callable[..., Any]) -> Callable[..., Any]:
    def _forward_compute_chunk(self: Any, phase: int) -> Any:
        if not capture.watching():
            return original(self, phase)
        stage, microbatch = position(self, phase, self.current_f_chunk_id)
        with capture.action_span(stage, "F", microbatch):
            return original(self, phase)

    return _forward_compute_chunk


def _backward(original: Callable[..., Any]) -> Callable[..., Any]:
    def _backward_compute_chunk(self: Any, phase: int, enable_zb: bool = False) -> Any:
        if self.forward_only or not capture.watching():
            return original(self, phase, enable_zb)
        stage, microbatch = position(self, phase, self.current_b_chunk_id)
        if enable_zb:
            self._tracekit_pending_weights.append((stage, microbatch))
        with capture.action_span(stage, "I" if enable_zb else "B", microbatch):
            return original(self, phase, enable_zb)

    return _backward_compute_chunk


def _forward_backward(original: Callable[..., Any]) -> Callable[..., Any]:
    def _forward_backward_compute_chunk(self: Any, phase0: int, phase1: int) -> Any:
        if self.forward_only or not capture.watching():
            return original(self, phase0, phase1)
        forward = position(self, phase0, self.current_f_chunk_id)
        backward_stage, backward_microbatch = position(self, phase1, self.current_b_chunk_id)
        with capture.pair_span(forward, (backward_stage, "B", backward_microbatch)):
            return original(self, phase0, phase1)

    return _forward_backward_compute_chunk


def _weight(original: Callable[..., Any]) -> Callable[..., Any]:
    def _weight_chunk(self: Any) -> Any:
        if self.forward_only or not capture.watching():
            return original(self)
        # The original waits on pending p2p work first; do it here so the wait is not inside W.
        self._commit_and_wait_comm()
        if not self._tracekit_pending_weights:
            report("DualPipe ran a weight chunk with no pending backward-for-inputs; left unlabelled")
            return original(self)
        stage, microbatch = self._tracekit_pending_weights.popleft()
        with capture.action_span(stage, "W", microbatch):
            return original(self)

    return _weight_chunk


def _commit_and_wait(original: Callable[..., Any]) -> Callable[..., Any]:
    def _commit_and_wait_comm(self: Any) -> Any:
        if not self.comm_ops or not capture.watching():
            return original(self)
        with capture.comm_span(p2p_direction(self.comm_ops)):
            return original(self)

    return _commit_and_wait_comm


def patch(module: ModuleType) -> None:
    """Label DualPipe's steps, actions and p2p waits (idempotent)."""
    pipe = module.DualPipe
    wrap_attribute(pipe, "step", _step)
    wrap_attribute(pipe, "_forward_compute_chunk", _forward)
    wrap_attribute(pipe, "_backward_compute_chunk", _backward)
    wrap_attribute(pipe, "_forward_backward_compute_chunk", _forward_backward)
    wrap_attribute(pipe, "_weight_chunk", _weight)
    wrap_attribute(pipe, "_commit_and_wait_comm", _commit_and_wait)
