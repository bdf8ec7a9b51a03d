"""Whether two runs can be compared op for op: the same schedule, depth, world size, micro-batches, layout.

A run's ``RunShape`` holds what decides which op of one run stands for which op of the other. Two
runs that differ in any of it are refused (one line naming the first difference); with
``allow_different`` they are compared where they still match: per (stage, kind), every rank that
ran a stage's work pooled, and links only between rank pairs both runs have.

Not for: the comparison itself (``tracekit.changes.explain``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.errors import TracekitError

RANK_KEY = ("rank", "stage", "kind")
"""Group key when the runs match: each rank's work on each stage, per kind."""

STAGE_KEY = ("stage", "kind")
"""Group key of runs compared with ``allow_different``: per stage and kind, whichever rank ran it."""


@dataclass(frozen=True)
class RunShape:
    """What makes two runs comparable op for op (None where the run does not say)."""

    source: str
    """``kineto`` or ``op-table``."""
    schedule: str | None
    pp: int | None
    world_size: int | None
    microbatches: int | None
    layout: tuple[tuple[int, tuple[int, ...]], ...]
    """Per rank (sorted), the stages it ran."""


@dataclass(frozen=True)
class Comparability:
    """How two runs are compared: by which group key, and what differs between them."""

    key: tuple[str, ...]
    """``RANK_KEY`` or ``STAGE_KEY``."""
    differences: tuple[str, ...]
    """What differs, one phrase each (empty when the runs match)."""


def _layout_phrase(layout: tuple[tuple[int, tuple[int, ...]], ...]) -> str:
    return ", ".join(f"rank {rank}: stage{'s' if len(stages) > 1 else ''} {'/'.join(map(str, stages))}"
                     for rank, stages in layout[:4]) + (" ..." if len(layout) > 4 else "")  # fmt: skip


def differences(base: RunShape, new: RunShape) -> tuple[str, ...]:
    """Each way ``new`` differs from ``base``, as ``"schedule 1f1b vs zbv"`` phrases, most basic first."""
    out = []
    if base.source != new.source:
        out.append(f"input {base.source} vs {new.source}")
    for name, label in (("schedule", "schedule"), ("pp", "pipeline depth"), ("world_size", "world size"),
                        ("microbatches", "micro-batches")):  # fmt: skip
        a, b = getattr(base, name), getattr(new, name)
        if a is not None and b is not None and a != b:
            out.append(f"{label} {a} vs {b}")
    if base.layout != new.layout and not any(
        p.startswith(("schedule", "pipeline depth", "world size")) for p in out
    ):
        out.append(f"layout ({_layout_phrase(base.layout)}) vs ({_layout_phrase(new.layout)})")
    return tuple(out)


def comparability(base: RunShape, new: RunShape, allow_different: bool, source: str) -> Comparability:
    """How to compare the runs; TracekitError naming the first difference unless ``allow_different``."""
    found = differences(base, new)
    if base.source != new.source:
        raise TracekitError(f"cannot compare {found[0]}: diff two trace directories or two op-tables", source)
    if found and not allow_different:
        raise TracekitError(
            f"runs differ: {found[0]}{'' if len(found) == 1 else f' (and {len(found) - 1} more)'}; "
            "--allow-different compares them per stage and kind",
            source,
        )
    return Comparability(key=STAGE_KEY if found else RANK_KEY, differences=found)
