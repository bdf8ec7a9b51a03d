"""Pieces every output of ``tracekit.present`` shares: ms columns, run facts, clock offsets, notes.

Not for: one command's document (the sibling modules).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import polars as pl

from tracekit.run_analysis import RunFacts
from tracekit.analysis.clock import ClockAlignment

_NS_PER_MS = 1_000_000


def in_ms(columns: list[str], origin: pl.Expr | int | None = 0) -> list[pl.Expr]:
    """Each ``x_ns`` column as ``x`` in milliseconds, counted from ``origin`` (ns)."""
    return [((pl.col(column) - origin) / _NS_PER_MS).alias(column.removesuffix("_ns")) for column in columns]


def facts_json(facts: RunFacts) -> dict[str, Any]:
    """The ``run`` object of the report's document (docs/report.md)."""
    out = asdict(facts)
    out.pop("source")
    out["ranks_present"] = list(facts.ranks_present)
    out["missing_ranks"] = list(facts.missing_ranks)
    return out


def notes_of(definitions: dict[str, str]) -> tuple[str, ...]:
    """Definitions as the notes printed under a table."""
    return tuple(f"{name}: {text}" for name, text in definitions.items())


def clock_json(alignment: ClockAlignment | None) -> dict[str, Any] | None:
    """Offsets per host and the violations left, or None for inputs without clocks to align."""
    if alignment is None:
        return None
    return {
        "offsets": alignment.offsets.to_dicts(),
        "dependencies": alignment.dependencies,
        "violations": alignment.violations,
        "worst_violation_ns": alignment.worst_violation_ns,
        "unresolved_hosts": list(alignment.unresolved_hosts),
    }
