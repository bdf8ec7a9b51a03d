"""Spans around pipeline actions: the label (inside a capture window) and the live timer, whichever are on.

Every patched schedule method and ``collectors.api`` wraps its work in one of these. Outside a
window and outside live mode they return one shared null context: a flag test and nothing more.

Not for deciding when a window is open (``collectors.capture``) nor for the label text
(``collectors.labels``). Imports torch and the standard library only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch.autograd.profiler import record_function

from collectors import capture, labels
from collectors.capture import current
from collectors.hooks import Guard
from collectors.stopping import DeferredSpan

_IDLE = contextlib.nullcontext()


@contextlib.contextmanager
def _both(outer: Any, inner: Any) -> Iterator[None]:
    with outer, inner:
        yield


def _watched(
    recorder: Any, label: str | None, timed: Any, probe: Any = None
) -> contextlib.AbstractContextManager[object]:
    """The label span (capture window), the live timer span and the probe, whichever are on.

    The probe (``collectors.probes``) sits inside the label, so it reads the action's own time. The
    label is entered and left with stop signals deferred (``collectors.stopping.DeferredSpan``).
    """
    span = None if label is None else DeferredSpan(record_function(label), recorder.signals)
    if span is not None and probe is not None:
        span = _both(span, probe)
    elif span is None:
        span = probe
    if span is None:
        return _IDLE if timed is None else timed
    return span if timed is None else _both(span, timed)


def _probe(recorder: Any, stage: int, kind: str, microbatch: int) -> Any:
    """The action's probe while a window with probes is open, else None."""
    buffer = recorder.probes
    if buffer is None or not recorder.labelling:
        return None
    return buffer.span(recorder.next_step - recorder.config.first_step, stage, kind, microbatch)


def action_span(stage: int, kind: str, microbatch: int) -> contextlib.AbstractContextManager[object]:
    """Label and/or time one compute action (what every patched schedule method wraps itself in)."""
    recorder = current()
    if recorder is None:
        return _IDLE
    return _watched(
        recorder,
        labels.action_label(stage, kind, microbatch) if recorder.labelling else None,
        None if recorder.live is None else recorder.live.action(stage, kind, microbatch),
        _probe(recorder, stage, kind, microbatch),
    )


def pair_span(
    forward: tuple[int, int], backward: tuple[int, str, int], label: bool = True
) -> contextlib.AbstractContextManager[object]:
    """Label and/or time an overlapped F&B pair; ``label=False`` when the schedule labels it itself."""
    recorder = current()
    if recorder is None:
        return _IDLE
    return _watched(
        recorder,
        labels.pair_label(forward, backward) if recorder.labelling and label else None,
        None if recorder.live is None else recorder.live.pair(forward, backward),
        _probe(recorder, forward[0], "F&B", forward[1]),
    )


def comm_span(op: str) -> contextlib.AbstractContextManager[object]:
    """Label and/or time a wait on pipeline communication."""
    recorder = current()
    if recorder is None:
        return _IDLE
    return _watched(
        recorder,
        labels.comm_label(op) if recorder.labelling else None,
        None if recorder.live is None else recorder.live.comm(),
    )


def guarded_span(original: Callable[..., Any], span_of: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` inside the span ``span_of(self, *args, **kwargs)`` while watching; the span is guarded.

    Arguments pass through untouched (a newer library may call its methods differently); a
    ``span_of`` that returns None, or has raised once (``collectors.hooks.Guard``), leaves
    ``original`` unwrapped. Every patched schedule method that runs inside one span uses this.
    """
    guard = Guard(original)

    def spanned(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not capture.watching():
            return original(self, *args, **kwargs)
        span = guard.attempt(lambda: span_of(self, *args, **kwargs))
        if span is None:
            return original(self, *args, **kwargs)
        with span:
            return original(self, *args, **kwargs)

    return spanned
