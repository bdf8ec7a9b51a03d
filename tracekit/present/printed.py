"""A result as it is printed: every shown table's cells as text, its CSV, the JSON bytes; no frame.

``printed(result)`` is the one step that reads a ``Result``'s frames for printing: each shown
table's columns with their headers, alignment and cells formatted (a float column to one number
of decimals, so its values line up), the table's CSV, and the payload's JSON. ``tracekit.cli.output``
prints a ``Printed`` in any format; ``tracekit.cli.result_store`` keeps it as JSON, so that a
repeated command prints the same bytes without polars or the analysis.

Not for: computing anything (``tracekit.present`` builds the ``Result``) or writing to a terminal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from tracekit.present.result import Result, Table, to_json

PRINTED_FORMAT = "tracekit-printed/1"
"""The stored form's version: a stored result of another version is never read."""

_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if code != 0x09}
"""Control characters (escape sequences, bells, carriage returns) -> a visible ``\\xNN``: text from
trace files and sidecars must never steer the terminal that shows it."""


def printable(text: str) -> str:
    """``text`` with every control character but tab shown as ``\\xNN``: nothing a terminal obeys."""
    return text.translate(_CONTROL)


def decimals_of(values: list[Any]) -> int:
    """Decimals for a whole float column, so its values line up: 1 from 100 up, 2 from 1, else 3."""
    finite = [abs(v) for v in values if isinstance(v, float) and math.isfinite(v)]
    largest = max(finite, default=0.0)
    return 1 if largest >= 100 else 2 if largest >= 1 else 3


def _cell(value: Any, decimals: int) -> str:
    """One value as a table shows it: ``-`` for missing, floats to ``decimals``, booleans as yes/no."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{decimals}f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return printable(str(value))


@dataclass(frozen=True)
class PrintedColumn:
    """One column as a terminal shows it."""

    name: str
    header: str
    right: bool
    """Right-aligned (numbers)."""
    cells: tuple[str, ...]


@dataclass(frozen=True)
class PrintedTable:
    """A shown table: title, notes, every column's cells, which of them a terminal shows, its CSV."""

    title: str
    notes: tuple[str, ...]
    columns: tuple[PrintedColumn, ...]
    default: tuple[str, ...] | None
    """The columns shown without ``--wide``, in their order (None: all)."""
    csv: str

    def shown(self, wide: bool) -> tuple[PrintedColumn, ...]:
        """The columns a terminal shows: ``default`` unless ``wide``."""
        if wide or self.default is None:
            return self.columns
        by_name = {column.name: column for column in self.columns}
        return tuple(by_name[name] for name in self.default)

    @property
    def narrowed(self) -> bool:
        """True when a terminal without ``--wide`` leaves a column out."""
        return len(self.shown(False)) < len(self.columns)


@dataclass(frozen=True)
class Printed:
    """Everything a command prints, in every format, without a frame."""

    json: bytes
    """The payload's JSON (``to_json``), without a final newline."""
    tables: tuple[PrintedTable, ...] = ()
    warnings: tuple[str, ...] = ()
    headline: tuple[str, ...] = ()
    definitions: tuple[str, ...] = ()

    def to_bytes(self) -> bytes:
        """The stored form: JSON, tagged with ``PRINTED_FORMAT``."""
        tables = [
            {
                "title": table.title,
                "notes": table.notes,
                "default": table.default,
                "csv": table.csv,
                "columns": [[c.name, c.header, c.right, c.cells] for c in table.columns],
            }
            for table in self.tables
        ]
        return orjson.dumps(
            {
                "format": PRINTED_FORMAT,
                "json": self.json.decode(),
                "tables": tables,
                "warnings": self.warnings,
                "headline": self.headline,
                "definitions": self.definitions,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Printed:
        """The ``Printed`` that ``to_bytes`` stored; ValueError, KeyError or TypeError when it is not one."""
        stored = orjson.loads(data)
        if stored["format"] != PRINTED_FORMAT:
            raise ValueError(f"stored as {stored['format']!r}, not {PRINTED_FORMAT!r}")
        tables = tuple(
            PrintedTable(
                title=_text(table["title"]),
                notes=_texts(table["notes"]),
                columns=tuple(
                    PrintedColumn(_text(name), _text(header), bool(right), _texts(cells))
                    for name, header, right, cells in table["columns"]
                ),
                default=None if table["default"] is None else _texts(table["default"]),
                csv=_text(table["csv"]),
            )
            for table in stored["tables"]
        )
        return cls(
            json=_text(stored["json"]).encode(),
            tables=tables,
            warnings=_texts(stored["warnings"]),
            headline=_texts(stored["headline"]),
            definitions=_texts(stored["definitions"]),
        )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, not {type(value).__name__}")
    return value


def _texts(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list):
        raise TypeError(f"expected a list, not {type(values).__name__}")
    return tuple(_text(value) for value in values)


def _printed_table(table: Table) -> PrintedTable:
    frame = table.frame
    columns = []
    for name, dtype in frame.schema.items():
        values = frame[name].to_list()
        places = decimals_of(values) if dtype.is_float() else 0
        cells = tuple(_cell(value, places) for value in values)
        columns.append(PrintedColumn(name, table.header(name), dtype.is_numeric(), cells))
    default = None if table.columns is None else tuple(c for c in table.columns if c in frame.columns)
    notes = tuple(printable(note) for note in table.notes)
    return PrintedTable(printable(table.title), notes, tuple(columns), default, frame.write_csv())


def printed(result: Result) -> Printed:
    """``result`` as it is printed: its shown tables' cells and CSV, its payload's JSON."""
    return Printed(
        json=to_json(result.payload),
        tables=tuple(_printed_table(table) for table in result.tables if table.shown),
        warnings=tuple(printable(warning) for warning in result.warnings),
        headline=result.headline,
        definitions=result.definitions,
    )
