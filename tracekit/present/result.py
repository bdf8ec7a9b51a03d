"""What a command produced, as data: a JSON payload, titled tables, warnings; and its JSON bytes.

``tracekit.present`` builds these from a ``RunAnalysis``; ``tracekit.cli.output.emit`` prints them.
This module imports no polars: a stored result (``tracekit.present.printed``) is printed without it.
JSON is deterministic: the same payload gives the same bytes (keys in insertion order, NaN as null).

Not for: printing (``tracekit.cli.output``) or computing anything.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class Table:
    """A titled frame for people to read, with notes printed under it (caveats, one line each)."""

    title: str
    frame: pl.DataFrame
    notes: tuple[str, ...] = ()
    name: str = "table"
    """File stem when written with ``--out`` (``{name}.parquet``)."""
    shown: bool = True
    """False for tables only written with ``--out`` (too long to print)."""
    columns: tuple[str, ...] | None = None
    """The columns a terminal shows by default (None: all); ``--wide`` shows all, files keep all."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Short terminal header per column, units included (``"saving ms"``); default: the name, ``_`` as space."""

    def header(self, column: str) -> str:
        """The terminal header of ``column``."""
        if column in self.headers:
            return self.headers[column]
        words = column.replace("_", " ")
        for unit, shown in ((" gib", " GiB"), (" pct", " %")):
            if words.endswith(unit):
                words = words.removesuffix(unit) + shown
        return words


@dataclass(frozen=True)
class Result:
    """What a command produced: the answer first, then the tables, the definitions on request.

    ``headline`` is one or two sentences printed before any table (who, how much, what next);
    ``definitions`` are printed after the tables only when asked (``--explain``); the JSON payload
    carries them under its own ``definitions`` key.
    """

    payload: dict[str, Any]
    tables: tuple[Table, ...] = ()
    warnings: tuple[str, ...] = ()
    headline: tuple[str, ...] = ()
    definitions: tuple[str, ...] = ()


def _json_default(value: Any) -> Any:
    polars = sys.modules.get("polars")  # a frame exists only where polars was imported
    if polars is not None and isinstance(value, polars.DataFrame):
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
