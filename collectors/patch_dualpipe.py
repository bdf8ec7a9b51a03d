"""Label DeepSeek's DualPipe and DualPipeV (package ``dualpipe``), which label nothing themselves.

``dualpipe.DualPipe`` (PyPI 1.0.0 and upstream) and ``dualpipe.DualPipeV`` (upstream only: the
PyPI release predates it) share their method names; a ``Layout`` per class says where a chunk sits.

DualPipe numbering (docs/labels.md, "DualPipe numbering"): on P pipeline ranks, DualPipe runs two
directions. Direction 0 enters at pp rank 0 and runs through ranks 0..P-1; direction 1 enters at
pp rank P-1 and runs through ranks P-1..0. Stage = position along the micro-batch's path, in
ScheduleDualPipeV's V numbering: pp rank r runs stage r (direction 0) and stage 2P-1-r (direction
1), so direction 1 occupies stages P..2P-1. Micro-batch = DualPipe's chunk id in its direction,
plus num_chunks/2 for direction 1, so (stage, micro-batch) is unique and micro-batches
0..num_chunks/2-1 pass stages 0..P-1 while the rest pass stages P..2P-1. DualPipe's "phase"
argument is relative: ranks in the second half swap them, hence the ``^ is_in_second_half`` the
source also applies.

DualPipeV numbering: every micro-batch enters at pp rank 0 and runs the V: phase 0 is stage r on
pp rank r, phase 1 is stage 2P-1-r; the micro-batch is the chunk id (the same as torch's
ScheduleDualPipeV).

Wrapped methods, on both classes:

- ``_forward_compute_chunk`` → F; ``_backward_compute_chunk`` → I when ``enable_zb`` (the weight
  gradient is deferred to WeightGradStore), else B; ``_weight_chunk`` → W of the oldest pending I
  (WeightGradStore is a FIFO); the p2p wait ``_weight_chunk`` starts with is labelled apart;
- ``_forward_backward_compute_chunk`` → the pair; without the modules' own overlap hook
  (``overlaped_forward_backward`` in 1.0.0, ``overlapped_forward_backward`` upstream) its halves
  run one after the other and carry their own labels; with it, the halves interleave inside one
  user call and only the pair is labelled;
- ``_commit_and_wait_comm`` → ``tracekit:comm:{send,recv,sendrecv}``;
- ``step`` → a training step; under ``torch.no_grad()`` (DualPipe's ``forward_only``) an
  evaluation, which labels nothing and is not counted as a training step.

Not for torch's ScheduleDualPipeV (``patch_torch``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from collectors import capture, spans
from collectors.files import report
from collectors.groups import group_ranks
from collectors.hooks import Guard, note_problem, wrap_attribute
from collectors.manifest import MicrobatchPath, ScheduleInfo
from collectors.patch_torch import p2p_direction
from collectors.work import stage_work

STAGE_NUMBERING = (
    "dualpipe-v: pp rank r runs stage r (direction 0) and stage 2P-1-r (direction 1); "
    "direction-1 micro-batches are numbered from num_chunks/2"
)


V_STAGE_NUMBERING = "dualpipev: pp rank r runs stage r (phase 0) and stage 2P-1-r (phase 1)"


def is_v(pipe: Any) -> bool:
    """True for a DualPipeV (upstream only), whose phases are absolute and micro-batches run the whole V."""
    return any(cls.__name__ == "DualPipeV" for cls in type(pipe).__mro__)


def position(pipe: Any, phase: int, chunk_counters: list[int]) -> tuple[int, int]:
    """(stage, micro-batch) of the next chunk for ``phase``, per STAGE_NUMBERING (or V_STAGE_NUMBERING)."""
    if is_v(pipe):
        stage = pipe.rank if phase == 0 else 2 * pipe.num_ranks - 1 - pipe.rank
        return stage, chunk_counters[phase]
    direction = phase ^ pipe.is_in_second_half
    chunk = chunk_counters[direction]
    if direction == 0:
        return pipe.rank, chunk
    return 2 * pipe.num_ranks - 1 - pipe.rank, pipe._tracekit_half_chunks + chunk


def describe(pipe: Any, num_chunks: int) -> ScheduleInfo:
    """What ``pipe`` (a DualPipe on this rank) runs in a step of ``num_chunks`` micro-batches."""
    ranks, half = pipe.num_ranks, num_chunks // 2
    v_shaped = is_v(pipe)
    two_paths = (
        MicrobatchPath(0, half, 0, ranks - 1),
        MicrobatchPath(half, num_chunks, ranks, 2 * ranks - 1),
    )
    return ScheduleInfo(
        class_name=type(pipe).__name__,
        name="dualpipev" if v_shaped else "dualpipe",
        pp_size=ranks,
        num_stages=2 * ranks,
        microbatches=num_chunks,
        stages=(pipe.rank, 2 * ranks - 1 - pipe.rank),
        paths=(MicrobatchPath(0, num_chunks, 0, 2 * ranks - 1),) if v_shaped else two_paths,
        stage_numbering=V_STAGE_NUMBERING if v_shaped else STAGE_NUMBERING,
        # module[phase] runs the stage of that relative phase (see ``position``).
        stage_work=tuple(
            work
            for work in (
                stage_work(position(pipe, phase, [0, 0])[0], module)
                for phase, module in enumerate(getattr(pipe, "module", ()))
            )
            if work is not None
        ),
        # By group rank; a rank_mapping may reorder pipeline ranks: the merge orders by stage.
        pipeline_group=group_ranks(getattr(pipe, "group", None)),
    )


def _begin(pipe: Any, num_chunks: int) -> bool:
    pipe._tracekit_half_chunks = num_chunks // 2
    pipe._tracekit_pending_weights = deque()
    return True


def _step(original: Callable[..., Any]) -> Callable[..., Any]:
    guard = Guard(original)

    def step(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        recorder = capture.current()
        if recorder is None:
            return original(self, *inputs, **kwargs)
        if not torch.is_grad_enabled():
            # step() runs forward_only under no_grad: an evaluation, not a training step.
            with recorder.evaluation():
                return original(self, *inputs, **kwargs)
        num_chunks = kwargs.get("num_chunks", 0)
        guard.attempt(lambda: _begin(self, num_chunks))
        recorder.begin_step(lambda: describe(self, num_chunks))
        try:
            result = original(self, *inputs, **kwargs)
        except BaseException as error:
            recorder.end_step(error)
            raise
        recorder.end_step()
        return result

    return step


def _forward_label(pipe: Any, phase: int) -> Any:
    stage, microbatch = position(pipe, phase, pipe.current_f_chunk_id)
    return spans.action_span(stage, "F", microbatch)


def _backward_label(pipe: Any, phase: int, enable_zb: bool = False) -> Any:
    if pipe.forward_only:
        return None
    stage, microbatch = position(pipe, phase, pipe.current_b_chunk_id)
    if enable_zb:
        pipe._tracekit_pending_weights.append((stage, microbatch))
    return spans.action_span(stage, "I" if enable_zb else "B", microbatch)


def _pair_label(pipe: Any, phase0: int, phase1: int) -> Any:
    if pipe.forward_only:
        return None
    forward = position(pipe, phase0, pipe.current_f_chunk_id)
    backward_stage, backward_microbatch = position(pipe, phase1, pipe.current_b_chunk_id)
    return spans.pair_span(forward, (backward_stage, "B", backward_microbatch))


def _comm_label(pipe: Any) -> Any:
    return spans.comm_span(p2p_direction(pipe.comm_ops)) if pipe.comm_ops else None


def _weight_label(pipe: Any) -> Any:
    if not pipe._tracekit_pending_weights:
        report("DualPipe ran a weight chunk with no pending backward-for-inputs; left unlabelled")
        return None
    stage, microbatch = pipe._tracekit_pending_weights.popleft()
    return spans.action_span(stage, "W", microbatch)


def _weight(original: Callable[..., Any]) -> Callable[..., Any]:
    guard = Guard(original)

    def _weight_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not capture.watching():
            return original(self, *args, **kwargs)
        wait = guard.attempt(lambda: None if self.forward_only else self._commit_and_wait_comm)
        if wait is None:
            return original(self, *args, **kwargs)
        # The original waits on pending p2p work first; do it here so the wait is not inside W.
        # Outside the guard: a failing wait is the job's own error and must reach it.
        wait()
        label = guard.attempt(lambda: _weight_label(self))
        if label is None:
            return original(self, *args, **kwargs)
        with label:
            return original(self, *args, **kwargs)

    return _weight_chunk


def patch(module: ModuleType) -> None:
    """Label the steps, actions and p2p waits of the DualPipe classes ``module`` defines (idempotent)."""
    for class_name in ("DualPipe", "DualPipeV"):
        if class_name in vars(module):
            _patch_class(vars(module)[class_name])


def _patch_class(pipe: type) -> None:
    wrappers: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
        "step": _step,
        "_weight_chunk": _weight,
        **{
            name: (lambda original, label_of=label_of: spans.guarded_span(original, label_of))
            for name, label_of in (
                ("_forward_compute_chunk", _forward_label),
                ("_backward_compute_chunk", _backward_label),
                ("_forward_backward_compute_chunk", _pair_label),
                ("_commit_and_wait_comm", _comm_label),
            )
        },
    }
    for name, make in wrappers.items():
        if hasattr(pipe, name):
            wrap_attribute(pipe, name, make)
        else:
            note_problem(f"{pipe.__name__} has no {name} (a version tracekit does not know): not labelled")
