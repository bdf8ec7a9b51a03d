"""Pipeline actions: the one value type shared by realized and simulated schedules.

An action is what one pipeline rank does for one micro-batch on one stage: a forward (F), a
full backward (B), a backward for inputs only (I) or a backward for weights only (W). An
overlapped forward/backward pair (DualPipe's F&B chunk) is an ``OverlappedPair`` of two actions.

Actions print the way torch.distributed.pipelining prints its own (``2F0``, ``(0F3;7B1)OVERLAP_F_B``)
and parse back. This module holds values only: no timing, no torch, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    """What an action computes."""

    FORWARD = "F"
    FULL_BACKWARD = "B"
    BACKWARD_INPUT = "I"
    BACKWARD_WEIGHT = "W"

    @property
    def is_backward(self) -> bool:
        """True for B and I: the action that carries the gradient to the previous stage."""
        return self in (Kind.FULL_BACKWARD, Kind.BACKWARD_INPUT)


KIND_CODES: tuple[str, ...] = tuple(kind.value for kind in Kind)
"""The one-letter codes in their canonical order: F, B, I, W."""


def action_pattern(prefix: str | None = None, kinds: str = "".join(KIND_CODES)) -> str:
    """The grammar of one action, ``{stage}{kind}{micro-batch}`` (``2F0``), as an unanchored regex.

    The one definition: the parsers below, the trace's label formats (``tracekit.trace.labels``)
    and the realized schedule's pair halves build their patterns from it (Python ``re`` and polars
    both read it). With ``prefix``, the parts are groups ``{prefix}stage``, ``{prefix}kind``,
    ``{prefix}mb``; ``kinds`` limits the kind letters.
    """
    if prefix is None:
        return rf"\d+[{kinds}]\d+"
    return rf"(?P<{prefix}stage>\d+)(?P<{prefix}kind>[{kinds}])(?P<{prefix}mb>\d+)"


def pair_body_pattern(forward: str | None = None, backward: str | None = None) -> str:
    """What an overlapped pair holds between its parentheses, ``0F3;7B1``: a forward, then a backward action."""
    backward_kinds = "".join(code for code in KIND_CODES if code != Kind.FORWARD.value)
    return f"{action_pattern(forward, Kind.FORWARD.value)};{action_pattern(backward, backward_kinds)}"


def pair_pattern(body: str | None = None) -> str:
    """The grammar of an overlapped pair, ``(0F3;7B1)OVERLAP_F_B``; ``body`` names a group around the halves."""
    inner = pair_body_pattern()
    return rf"\({inner if body is None else f'(?P<{body}>{inner})'}\)OVERLAP_F_B"


_ACTION_RE = re.compile(f"^{action_pattern('')}$")
_PAIR_RE = re.compile(f"^{pair_pattern(body='halves')}$")


@dataclass(frozen=True, slots=True, order=True)
class Action:
    """One compute action: ``stage`` runs ``kind`` for ``microbatch``; prints as ``2F0``."""

    stage: int
    kind: Kind
    microbatch: int

    def __post_init__(self) -> None:
        assert self.stage >= 0 and self.microbatch >= 0, self

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @classmethod
    def parse(cls, text: str) -> Action:
        """Parse ``2F0``-style text; raises ValueError on anything else."""
        match = _ACTION_RE.match(text.strip())
        if match is None:
            raise ValueError(f"not an action: {text!r} (expected stage, kind F/B/I/W, micro-batch, e.g. 2F0)")
        return cls(int(match["stage"]), Kind(match["kind"]), int(match["mb"]))


@dataclass(frozen=True, slots=True)
class OverlappedPair:
    """A forward and a backward run as one overlapped chunk (DualPipe's F&B)."""

    forward: Action
    backward: Action

    def __post_init__(self) -> None:
        assert self.forward.kind is Kind.FORWARD and self.backward.kind is not Kind.FORWARD, self

    def __str__(self) -> str:
        return f"({self.forward};{self.backward})OVERLAP_F_B"

    @property
    def halves(self) -> tuple[Action, Action]:
        """The forward half, then the backward half."""
        return (self.forward, self.backward)

    @classmethod
    def parse(cls, text: str) -> OverlappedPair:
        """Parse ``(0F3;7B1)OVERLAP_F_B``; raises ValueError on anything else."""
        match = _PAIR_RE.match(text.strip())
        if match is None:
            raise ValueError(f"not an overlapped pair: {text!r} (expected e.g. (0F3;7B1)OVERLAP_F_B)")
        forward, backward = match["halves"].split(";")
        return cls(Action.parse(forward), Action.parse(backward))


Step = Action | OverlappedPair
"""One entry of a rank's ordered action list."""


def parse_step(text: str) -> Step:
    """Parse either an action or an overlapped pair."""
    text = text.strip()
    return OverlappedPair.parse(text) if text.startswith("(") else Action.parse(text)


def flatten(steps: list[Step] | tuple[Step, ...]) -> list[Action]:
    """The actions of a rank's list in order, each overlapped pair as its forward then backward half."""
    actions: list[Action] = []
    for step in steps:
        actions.extend(step.halves if isinstance(step, OverlappedPair) else (step,))
    return actions
