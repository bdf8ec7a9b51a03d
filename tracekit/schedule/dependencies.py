"""The one dependency rule of pipeline actions: which action must end before another can start.

From the stage numbering (docs/schedules.md: along micro-batch m's path stage ``s`` feeds
``s + 1``), with ``first`` and ``last`` the first and last stage of m's path:

- F(s, m) needs F(s-1, m), unless s is ``first``;
- the backward (B or I) of (s, m) needs the backward of (s+1, m), or F(s, m) when s is ``last``
  (the loss);
- W(s, m) needs I(s, m).

An action is looked up by its *slot*: F, the backward (B or I, whichever carries the gradient),
W, and I alone (what a W waits for; an I fills both the backward slot and this one). The rule is
written once, array-wise (``producers``), for the simulator (``engine.simulate``), the what-if
replay of realized runs (``tracekit.whatif.pipeline``) and the clock alignment's cross-rank edges.
Not for timing (``timing``).
"""

from __future__ import annotations

import numpy as np

from tracekit.schedule.action import Kind

FORWARD_SLOT, BACKWARD_SLOT, WEIGHT_SLOT, INPUT_SLOT = 0, 1, 2, 3
"""Slots an action is found by; ``NO_SLOT`` marks an action that needs nothing."""
NO_SLOT = -1
NUM_SLOTS = 4

KIND_CODE: dict[Kind, int] = {Kind.FORWARD: 0, Kind.FULL_BACKWARD: 1, Kind.BACKWARD_INPUT: 2, Kind.BACKWARD_WEIGHT: 3}
"""Each kind's integer code in the array form (F, B, I, W: ``KIND_CODES`` order)."""
CODE_KIND: tuple[Kind, ...] = tuple(KIND_CODE)
"""Kind of each code."""

_OWN_SLOT = np.array([FORWARD_SLOT, BACKWARD_SLOT, BACKWARD_SLOT, WEIGHT_SLOT], dtype=np.int64)


def own_slots(kind: np.ndarray) -> np.ndarray:
    """The slot each action (by kind code) fills; an I also fills ``INPUT_SLOT`` (see ``is_input``)."""
    return _OWN_SLOT[kind]


def is_input(kind: np.ndarray) -> np.ndarray:
    """True for I actions, which fill ``INPUT_SLOT`` besides the backward slot."""
    return kind == KIND_CODE[Kind.BACKWARD_INPUT]


def producers(
    kind: np.ndarray, stage: np.ndarray, first: np.ndarray, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(slot, stage) of what each action needs at the same micro-batch; slot ``NO_SLOT`` when nothing.

    ``kind`` holds kind codes (``KIND_CODE``); ``first`` and ``last`` bound each action's path.
    """
    forward = kind == KIND_CODE[Kind.FORWARD]
    weight = kind == KIND_CODE[Kind.BACKWARD_WEIGHT]
    backward = ~(forward | weight)
    at_loss = backward & (stage >= last)
    slot = np.where(
        forward,
        np.where(stage > first, FORWARD_SLOT, NO_SLOT),
        np.where(weight, INPUT_SLOT, np.where(at_loss, FORWARD_SLOT, BACKWARD_SLOT)),
    )
    needed_stage = np.where(forward, stage - 1, np.where(backward & ~at_loss, stage + 1, stage))
    return slot.astype(np.int64), needed_stage.astype(np.int64)


def slot_keys(
    slot: np.ndarray, stage: np.ndarray, microbatch: np.ndarray, num_stages: int, num_microbatches: int
) -> np.ndarray:
    """One integer per (slot, stage, micro-batch): ``(slot * stages + stage) * micro-batches + mb``; -1 for ``NO_SLOT``."""
    keys = (slot * num_stages + stage) * num_microbatches + microbatch
    return np.where(slot == NO_SLOT, -1, keys)

