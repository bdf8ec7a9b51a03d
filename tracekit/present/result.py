"""What a command produced, as data: a JSON payload, titled tables, warnings; and its JSON bytes.

``tracekit.present`` builds these from a ``RunAnalysis``; ``tracekit.cli.output.emit`` prints them.
JSON is deterministic: the same payload gives the same bytes (keys in insertion order, NaN as null).

Not for: printing (``tracekit.cli.output``) or computing anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import orjson
import polars as pl


@dataclass(frozen=True)
class Table:
    """A titled frame for people to read, with notes printed under it (definitions, caveats)."""

    title: str
    frame: pl.DataFrame
    notes: tuple[str, ...] = ()
    name: str = "table"
    """File stem when written with ``--out`` (``{name}.parquet``)."""
    shown: bool = True
    """False for tables only written with ``--out`` (too long to print)."""


@dataclass(frozen=True)
class Result:
    """What a command produced: the stable JSON payload, its tables, and warnings to surface."""

    payload: dict[str, Any]
    tables: tuple[Table, ...] = ()
    warnings: tuple[str, ...] = ()


def _json_default(value: Any) -> Any:
    if isinstance(value, pl.DataFrame):
        return value.to_dicts()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"cannot serialize {type(value).__name__}")


def to_json(payload: dict[str, Any]) -> bytes:
    """Serialize a payload; NaN becomes null so every consumer can read it."""
    return orjson.dumps(
        payload, default=_json_default, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    )
