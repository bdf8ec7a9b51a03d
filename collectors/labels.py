"""The ``tracekit:`` labels the collectors put on ``record_function`` spans (grammar: docs/labels.md).

One function per label kind, so the grammar is written down once on the emitting side; the parser
in ``tracekit/trace/labels.py`` reads the same grammar. Standard library only: the collectors run
inside the training job.
"""

from __future__ import annotations

PREFIX = "tracekit:"

KINDS: dict[str, str] = {
    "F": "forward",
    "B": "full backward (inputs and weights)",
    "I": "backward for inputs only",
    "W": "backward for weights only",
}
"""Action kind codes and what each computes."""

COMM_OPS: dict[str, str] = {
    "recv": "waiting for received activations or gradients",
    "send": "waiting for sends to complete",
    "sendrecv": "waiting on a batch that both sends and receives",
    "wait": "waiting on point-to-point work of unknown direction",
}
"""``tracekit:comm:{op}`` ops the collectors emit."""


def action_label(stage: int, kind: str, microbatch: int) -> str:
    """``tracekit:3F0``: stage 3 runs a forward of micro-batch 0."""
    return f"{PREFIX}{stage}{kind}{microbatch}"


def pair_label(forward: tuple[int, int], backward: tuple[int, str, int]) -> str:
    """``tracekit:(0F3;7B1)OVERLAP_F_B`` from (stage, micro-batch) and (stage, kind, micro-batch)."""
    return f"{PREFIX}({forward[0]}F{forward[1]};{backward[0]}{backward[1]}{backward[2]})OVERLAP_F_B"


def step_label(number: int) -> str:
    """``tracekit:step#0``: ``number`` counts from 0 at the first captured step."""
    return f"{PREFIX}step#{number}"


def comm_label(op: str) -> str:
    """``tracekit:comm:recv``: time spent waiting on pipeline communication."""
    return f"{PREFIX}comm:{op}"
