"""Label Megatron-core's pipeline schedules (PyPI ``megatron-core``), which label nothing tracekit reads.

``patch(schedules)`` takes ``megatron.core.pipeline_parallel.schedules`` right after it is imported
(before the job can fetch a function from ``get_forward_backward_func()``) and wraps, once:

- ``forward_backward_pipelining_without_interleaving`` (1F1B) and ``..._with_interleaving``
  (interleaved 1F1B, virtual pipeline): one call is one training step; a call with
  ``forward_only=True`` is an evaluation, which is left out of the steps and labels nothing;
- the module-level ``forward_step`` → F of ``current_microbatch`` at stage
  ``vp_stage * pp_size + pp_rank`` (torch's interleaved numbering; 1F1B: stage = pp rank);
- the module-level ``backward_step`` → B. It carries no micro-batch id, but the schedules hand it
  the very ``output_tensor`` object ``forward_step`` returned, so the forward's (stage, micro-batch)
  is looked up by that object's identity;
- ``combined_1f1b.combined_forward_backward_step`` (the overlapped F&B of MoE all-to-all hiding,
  where the installed version has it) → the pair, or the lone F or B it runs at the edges;
- ``P2PCommunicator._communicate`` (every blocking p2p exchange goes through it) →
  ``tracekit:comm:{send,recv,sendrecv}``.

The schedules call ``forward_step``/``backward_step`` as module globals, and
``get_forward_backward_func`` returns module globals, so replacing the module attributes reaches
every call. Not for Megatron's CPU shims (those belong to the job: ``examples.megatron_job``)
nor for ``forward_backward_no_pipelining`` (no pipeline). Imports torch and the standard library;
megatron itself only through the module handed in.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from collectors import capture, spans
from collectors.files import report
from collectors.groups import group_ranks
from collectors.hooks import Guard, wrap_attribute
from collectors.manifest import MicrobatchPath, ScheduleInfo

SCHEDULE_FUNCTIONS: dict[str, str] = {
    "forward_backward_pipelining_without_interleaving": "1f1b",
    "forward_backward_pipelining_with_interleaving": "interleaved-1f1b",
}
"""Megatron-core schedule function -> tracekit's normalized schedule name."""

STAGE_NUMBERING = (
    "megatron-core: stage = vp_stage * pp_size + pp_rank (model chunk vp_stage on pp rank pp_rank)"
)


@dataclass
class _StepState:
    """What the labels of one running schedule call need: the rank's place and its live forwards."""

    pp_rank: int
    pp_size: int
    group: Any = None
    """Megatron's pipeline-parallel process group."""
    forwards: dict[int, tuple[int, int]] = field(default_factory=dict)
    """id(output_tensor forward_step returned) -> (stage, micro-batch), until its backward pops it."""


_running: list[_StepState] = []
"""The schedule call in progress in this process (a list, so a nested call cannot lose the outer one)."""


def _pipeline_group(schedules: ModuleType, kwargs: dict[str, Any]) -> Any:
    communicator = kwargs.get("p2p_communicator")
    if communicator is not None:
        return communicator.pp_group
    return schedules.parallel_state.get_pipeline_model_parallel_group()


def describe(
    function_name: str, pp_rank: int, pp_size: int, kwargs: dict[str, Any], group: Any = None
) -> ScheduleInfo:
    """What one call of a Megatron-core schedule function runs on this rank (``group``: its pipeline group)."""
    model = kwargs.get("model")
    chunks = len(model) if isinstance(model, (list, tuple)) else 1
    microbatches = int(kwargs["num_microbatches"])
    num_stages = chunks * pp_size
    return ScheduleInfo(
        class_name=function_name,
        name=SCHEDULE_FUNCTIONS[function_name],
        pp_size=pp_size,
        num_stages=num_stages,
        microbatches=microbatches,
        stages=tuple(chunk * pp_size + pp_rank for chunk in range(chunks)),
        paths=(MicrobatchPath(0, microbatches, 0, num_stages - 1),),
        stage_numbering=STAGE_NUMBERING,
        pipeline_group=None if group is None else group_ranks(group),
    )


def _schedule(
    schedules: ModuleType, function_name: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def forward_backward(*args: Any, **kwargs: Any) -> Any:
            recorder = capture.current()
            if recorder is None:
                return original(*args, **kwargs)
            if kwargs.get("forward_only", False):
                with recorder.evaluation():
                    return original(*args, **kwargs)
            try:
                group = _pipeline_group(schedules, kwargs)
                state = _StepState(group.rank(), group.size(), group)
            except Exception as error:  # noqa: BLE001 - an unknown megatron version must not stop training
                report(f"cannot find megatron's pipeline group ({error!r}); this step is not labelled")
                return original(*args, **kwargs)
            recorder.begin_step(
                lambda: describe(function_name, state.pp_rank, state.pp_size, kwargs, state.group)
            )
            _running.append(state)
            try:
                result = original(*args, **kwargs)
            except BaseException as error:
                _running.remove(state)
                recorder.end_step(error)
                raise
            _running.remove(state)
            recorder.end_step()
            return result

        return forward_backward

    return make


def _forward_step(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)
    guard = Guard(original)

    def place(state: _StepState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int] | None:
        bound = signature.bind(*args, **kwargs).arguments
        microbatch = bound.get("current_microbatch")
        if microbatch is None:
            return None
        return (bound.get("vp_stage") or 0) * state.pp_size + state.pp_rank, int(microbatch)

    def forward_step(*args: Any, **kwargs: Any) -> Any:
        if not _running or not capture.watching():
            return original(*args, **kwargs)
        state = _running[-1]
        forward = guard.attempt(lambda: place(state, args, kwargs))
        if forward is None:
            return original(*args, **kwargs)
        with spans.action_span(forward[0], "F", forward[1]):
            result = original(*args, **kwargs)
        # forward_step returns (output_tensor, num_tokens); the schedule keeps output_tensor for backward.
        guard.attempt(lambda: state.forwards.__setitem__(id(result[0]), forward))
        return result

    return forward_step


def _backward_step(original: Callable[..., Any]) -> Callable[..., Any]:
    def backward_step(*args: Any, **kwargs: Any) -> Any:
        if not _running or not capture.watching():
            return original(*args, **kwargs)
        output_tensor = args[1] if len(args) > 1 else kwargs.get("output_tensor")
        forward = _running[-1].forwards.pop(id(output_tensor), None)
        if forward is None:
            report("megatron ran a backward_step whose forward was not seen; left unlabelled")
            return original(*args, **kwargs)
        with spans.action_span(forward[0], "B", forward[1]):
            return original(*args, **kwargs)

    return backward_step


def _combined_span(
    signature: inspect.Signature, state: _StepState, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[contextlib.AbstractContextManager[object], tuple[int, int] | None] | None:
    """The span of one combined F&B call and its forward's (stage, micro-batch); None: nothing known."""
    bound = signature.bind(*args, **kwargs).arguments
    forward = None
    if bound.get("f_model") is not None and bound.get("current_microbatch") is not None:
        chunk = bound.get("f_model_chunk_id") or 0
        forward = (chunk * state.pp_size + state.pp_rank, int(bound["current_microbatch"]))
    backward = None
    if bound.get("b_model") is not None:
        backward = state.forwards.pop(id(bound.get("b_output_tensor")), None)
    if forward is not None and backward is not None:
        return spans.pair_span(forward, (backward[0], "B", backward[1])), forward
    if forward is not None:
        return spans.action_span(forward[0], "F", forward[1]), forward
    if backward is not None:
        return spans.action_span(backward[0], "B", backward[1]), None
    return None


def _combined_forward_backward(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)
    guard = Guard(original)

    def combined_forward_backward_step(*args: Any, **kwargs: Any) -> Any:
        if not _running or not capture.watching():
            return original(*args, **kwargs)
        state = _running[-1]
        found = guard.attempt(lambda: _combined_span(signature, state, args, kwargs))
        if found is None:
            return original(*args, **kwargs)
        span, forward = found
        with span:
            result = original(*args, **kwargs)
        if forward is not None:
            # Returns (output_tensor, num_tokens, input_tensor_grad).
            guard.attempt(lambda: state.forwards.__setitem__(id(result[0]), forward))
        return result

    return combined_forward_backward_step


def p2p_direction(kwargs: dict[str, Any]) -> str:
    """The labels.COMM_OPS key of one ``_communicate`` call: ``send``, ``recv`` or ``sendrecv``."""
    sends = kwargs.get("tensor_send_next") is not None or kwargs.get("tensor_send_prev") is not None
    receives = bool(kwargs.get("recv_prev")) or bool(kwargs.get("recv_next"))
    return "sendrecv" if sends and receives else "send" if sends else "recv" if receives else "wait"


def _communicate(original: Callable[..., Any]) -> Callable[..., Any]:
    def _communicate(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args or not _running or not capture.watching():
            return original(self, *args, **kwargs)
        with spans.comm_span(p2p_direction(kwargs)):
            return original(self, *args, **kwargs)

    return _communicate


def patch(schedules: ModuleType) -> None:
    """Label the steps, actions and p2p waits of Megatron-core's pipeline schedules (idempotent)."""
    for function_name in SCHEDULE_FUNCTIONS:
        wrap_attribute(schedules, function_name, _schedule(schedules, function_name))
    wrap_attribute(schedules, "forward_step", _forward_step)
    wrap_attribute(schedules, "backward_step", _backward_step)
    wrap_attribute(schedules.P2PCommunicator, "_communicate", _communicate)
    # The schedules module imports combined_1f1b (versions that have it) before it is handed here.
    combined = sys.modules.get("megatron.core.pipeline_parallel.combined_1f1b")
    if combined is not None and hasattr(combined, "combined_forward_backward_step"):
        wrap_attribute(combined, "combined_forward_backward_step", _combined_forward_backward)
