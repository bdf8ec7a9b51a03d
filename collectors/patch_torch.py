"""Label torch.distributed.pipelining's actions, steps and p2p waits (docs/labels.md).

``patch(schedules_module)`` wraps, once per process:

- ``_PipelineStageBase.forward_one_chunk`` (F), ``backward_one_chunk`` (B when
  ``full_backward``, else I) and ``backward_weight_one_chunk`` (W): every schedule, runtime or
  hand-written (Schedule1F1B labels nothing itself, ScheduleGPipe only ``Forward i``), computes
  through these three, so the labels are uniform and tight around the compute;
- every schedule class's own ``step`` (a training step, and the moment the window opens/closes;
  a forward-only call, ``eval()`` or a schedule without a loss, is an evaluation instead);
- the schedules module's ``_wait_batch_p2p`` (every wait on send/recv work goes through it) and
  ``_batch_p2p`` (to know whether a batch sends, receives or both);
- the schedules module's ``record_function`` name, so the runtime's ``PP:(a;b)OVERLAP_F_B`` span
  gets a ``tracekit:`` pair span around the two halves the runtime runs one after the other.

Each wrapper tests one flag and calls through when no capture window is open and live mode is off;
otherwise ``collectors.capture`` labels the action (window open) and/or times it (live mode). Not for DualPipe
(``collectors.patch_dualpipe``) nor for the capture itself (``collectors.capture``).
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch.distributed as dist

from collectors import capture, spans
from collectors.groups import group_ranks
from collectors.hooks import Guard, wrap_attribute
from collectors.manifest import MicrobatchPath, ScheduleInfo
from collectors.work import stage_work

SCHEDULE_NAMES: dict[str, str] = {
    "ScheduleGPipe": "gpipe",
    "Schedule1F1B": "1f1b",
    "ScheduleInterleaved1F1B": "interleaved-1f1b",
    "ScheduleLoopedBFS": "looped-bfs",
    "ScheduleInterleavedZeroBubble": "interleaved-zero-bubble",
    "ScheduleZBVZeroBubble": "zbv",
    "ScheduleDualPipeV": "dualpipev",
    "_ScheduleForwardOnly": "forward-only",
    "_PipelineScheduleRuntime": "csv-runtime",
}
"""torch schedule class -> normalized name (a subclass takes its nearest listed base's name)."""

_PP_PAIR = re.compile(r"^PP:\((\d+)F(\d+);(\d+)([BI])(\d+)\)OVERLAP_F_B$")
"""torch's label of an overlapped pair (``PP:(0F3;7B1)OVERLAP_F_B``): forward stage, mb; backward stage, kind, mb."""


class _TaggedWorks(list):  # type: ignore[type-arg]
    """The works of one p2p batch, tagged with its direction (a labels.COMM_OPS key)."""

    op: str = "wait"


def p2p_direction(p2p_ops: list[Any]) -> str:
    """The labels.COMM_OPS key of a batch of p2p ops: ``send``, ``recv`` or ``sendrecv``."""
    kinds = {op.op for op in p2p_ops}
    return "send" if kinds == {dist.isend} else "recv" if kinds == {dist.irecv} else "sendrecv"


def _forward_span(self: Any, *args: Any, **kwargs: Any) -> Any:
    return spans.action_span(self.stage_index, "F", args[0] if args else kwargs["fwd_chunk_id"])


def _backward_span(self: Any, *args: Any, **kwargs: Any) -> Any:
    # Signature: (bwd_chunk_id, loss=None, full_backward=True, last_backward=False).
    chunk = args[0] if args else kwargs["bwd_chunk_id"]
    full = kwargs.get("full_backward", args[2] if len(args) > 2 else True)
    return spans.action_span(self.stage_index, "B" if full else "I", chunk)


def _backward_weight_span(self: Any, *args: Any, **kwargs: Any) -> Any:
    return spans.action_span(self.stage_index, "W", args[0] if args else kwargs["bwd_chunk_id"])


def describe(schedule: Any) -> ScheduleInfo:
    """What ``schedule`` (a torch pipelining schedule on this rank) runs."""
    stages = [schedule._stage] if hasattr(schedule, "_stage") else list(schedule._stages)
    num_stages = stages[0].num_stages
    cls = type(schedule)
    name = next(
        (SCHEDULE_NAMES[c.__name__] for c in cls.__mro__ if c.__name__ in SCHEDULE_NAMES), cls.__name__
    )
    microbatches = schedule._n_microbatches
    return ScheduleInfo(
        class_name=cls.__name__,
        name=name,
        pp_size=stages[0].group_size,
        num_stages=num_stages,
        microbatches=microbatches,
        stages=tuple(stage.stage_index for stage in stages),
        paths=(MicrobatchPath(0, microbatches, 0, num_stages - 1),),
        stage_work=tuple(
            work
            for work in (stage_work(stage.stage_index, getattr(stage, "submod", None)) for stage in stages)
            if work is not None
        ),
        # PipelineStage.group: the pipeline's process group (None: the default group); its group
        # rank is the pipeline rank.
        pipeline_group=group_ranks(getattr(stages[0], "group", None)),
    )


def _step(original: Callable[..., Any]) -> Callable[..., Any]:
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = capture.current()
        if recorder is None:
            return original(self, *args, **kwargs)
        if not getattr(self, "_has_backward", True):
            # eval(), or a schedule without a loss: forward-only, an evaluation, not a training step.
            with recorder.evaluation():
                return original(self, *args, **kwargs)
        recorder.begin_step(lambda: describe(self))
        try:
            result = original(self, *args, **kwargs)
        except BaseException as error:
            recorder.end_step(error)
            raise
        recorder.end_step()
        return result

    return step


def _tagged(works: list[Any], p2p_ops: list[Any]) -> _TaggedWorks:
    tagged = _TaggedWorks(works)
    tagged.op = p2p_direction(p2p_ops)
    return tagged


def _batch_p2p(original: Callable[..., Any]) -> Callable[..., Any]:
    guard = Guard(original)

    def batch_p2p(p2p_ops: list[dist.P2POp], *args: Any, **kwargs: Any) -> Any:
        works = original(p2p_ops, *args, **kwargs)
        if not capture.watching() or not works:
            return works
        tagged = guard.attempt(lambda: _tagged(works, p2p_ops))
        return works if tagged is None else tagged

    return batch_p2p


def _wait_batch_p2p(original: Callable[..., Any]) -> Callable[..., Any]:
    guard = Guard(original)

    def wait_batch_p2p(work: list[dist.Work]) -> Any:
        if not work or not capture.watching():
            return original(work)
        span = guard.attempt(lambda: spans.comm_span(getattr(work, "op", "wait")))
        if span is None:
            return original(work)
        with span:
            return original(work)

    return wait_batch_p2p


@contextlib.contextmanager
def _nested(outer: Any, inner: Any) -> Iterator[None]:
    with outer, inner:
        yield


def _pair_span(name: str) -> Any:
    match = _PP_PAIR.match(name) if name.startswith("PP:(") else None
    if match is None:
        return None
    return spans.pair_span((int(match[1]), int(match[2])), (int(match[3]), match[4], int(match[5])))


def _record_function(original: Callable[..., Any]) -> Callable[..., Any]:
    guard = Guard(original)

    def record_function_with_pairs(name: str, *args: Any, **kwargs: Any) -> Any:
        span = original(name, *args, **kwargs)
        if not capture.watching():
            return span
        pair = guard.attempt(lambda: _pair_span(name))
        return span if pair is None else _nested(span, pair)

    return record_function_with_pairs


def patch(schedules: ModuleType) -> None:
    """Label the actions, steps and waits of torch.distributed.pipelining (idempotent)."""
    stage_base = importlib.import_module("torch.distributed.pipelining.stage")._PipelineStageBase
    for name, span_of in (
        ("forward_one_chunk", _forward_span),
        ("backward_one_chunk", _backward_span),
        ("backward_weight_one_chunk", _backward_weight_span),
    ):
        wrap_attribute(
            stage_base, name, lambda original, span_of=span_of: spans.guarded_span(original, span_of)
        )
    for value in list(vars(schedules).values()):
        if (
            isinstance(value, type)
            and issubclass(value, schedules._PipelineSchedule)
            and "step" in vars(value)
        ):
            wrap_attribute(value, "step", _step)
    wrap_attribute(schedules, "_batch_p2p", _batch_p2p)
    wrap_attribute(schedules, "_wait_batch_p2p", _wait_batch_p2p)
    wrap_attribute(schedules, "record_function", _record_function)
