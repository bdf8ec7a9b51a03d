"""The Python API of a capture, for jobs that are not run by ``tracekit record``.

``Capture`` makes a recorder current for a ``with`` block; ``step()`` marks a custom loop's
training step; ``mark``, ``mark_pair`` and ``mark_comm`` label (and in live mode time) a custom
loop's actions and communication waits (docs/labels.md).

Not for the capture state machine itself (``collectors.capture``). Imports torch (through
``collectors.capture``) and the standard library only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from collectors import labels
from collectors.capture import CaptureConfig, Recorder, current, set_current
from collectors.manifest import ScheduleInfo
from collectors.spans import action_span, comm_span, pair_span
from collectors.window import parse_steps


@contextlib.contextmanager
def step() -> Iterator[None]:
    """Mark one training step of a custom loop (``with collectors.step(): ...``)."""
    recorder = current()
    if recorder is None:
        yield
        return
    recorder.begin_step()
    try:
        yield
    except BaseException as error:
        recorder.end_step(error)
        raise
    recorder.end_step()


def mark(stage: int, kind: str, microbatch: int) -> contextlib.AbstractContextManager[object]:
    """Label one compute action of a pipeline tracekit does not patch: ``with mark(3, "F", 0): ...``."""
    if kind not in labels.KINDS:
        raise ValueError(f"kind must be one of {', '.join(labels.KINDS)}, not {kind!r}")
    return action_span(stage, kind, microbatch)


def mark_pair(
    forward: tuple[int, int], backward: tuple[int, str, int]
) -> contextlib.AbstractContextManager[object]:
    """Label an overlapped F&B chunk: forward (stage, mb), backward (stage, kind, mb); mark its halves inside."""
    if backward[1] not in ("B", "I"):
        raise ValueError(f"the backward half of a pair is B or I, not {backward[1]!r}")
    return pair_span(forward, backward)


def mark_comm(op: str) -> contextlib.AbstractContextManager[object]:
    """Label a wait on pipeline communication: ``with mark_comm("recv"): work.wait()``."""
    if op not in labels.COMM_OPS:
        raise ValueError(f"op must be one of {', '.join(labels.COMM_OPS)}, not {op!r}")
    return comm_span(op)


class Capture:
    """Capture steps of a job from Python: ``with Capture("out", steps=range(1, 3)) as cap: ... cap.step()``.

    Entering patches torch.distributed.pipelining schedules and DualPipe (now or when they are
    imported), so their ``step()`` calls count as steps and their actions are labelled; custom loops
    mark steps with ``cap.step()`` and actions with ``mark``. Each rank writes its own files; merge
    them with ``collectors.write_manifest(out_dir)`` once every rank is done. As with ``tracekit
    record``, an earlier capture in ``out_dir`` is moved aside (``out_dir/earlier-STAMP``) only once
    a rank of this run has written its trace; until then the files wait in a hidden directory.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        steps: range | str | None = range(1, 3),
        *,
        schedule: ScheduleInfo | None = None,
        patch: bool = True,
        profile_memory: bool = True,
        probes: bool = True,
    ) -> None:
        if isinstance(steps, str):
            first, stop = parse_steps(steps)
        elif steps is None:
            first, stop = 0, None
        else:
            if steps.step != 1:
                raise ValueError("steps must be a contiguous range")
            first, stop = steps.start, steps.stop
        self.config = CaptureConfig(
            Path(out_dir),
            first,
            stop,
            os.environ.get("TRACEKIT_RUN_ID"),
            schedule,
            profile_memory=profile_memory,
            probes=probes,
            staged=True,
        )
        self.recorder = Recorder(self.config)
        self._patch = patch
        self._previous: Recorder | None = None

    def __enter__(self) -> Capture:
        if self._patch:
            from collectors import hooks

            hooks.install()
        self._previous = current()  # under tracekit record too: restored on exit
        set_current(self.recorder)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.recorder.finish()
        set_current(self._previous)

    def step(self) -> contextlib.AbstractContextManager[None]:
        """Mark one training step (a context manager)."""
        return step()
