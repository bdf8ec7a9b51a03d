"""The one place that prints command results: rich tables, JSON or CSV.

Commands take a ``Result`` (a JSON payload plus the tables a person reads) from
``tracekit.present`` and hand it to ``emit``; they never print or format by themselves.
"""

from __future__ import annotations

import math
import sys
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable
from rich.text import Text

from tracekit.cli.files import output_dir, write_atomic
from tracekit.present.result import Result, Table, to_json

__all__ = ["Format", "Result", "Table", "emit", "to_json"]

_UNBOUNDED_WIDTH = 400
"""Console width when stdout is not a terminal: wide enough that no table is truncated."""


class Format(str, Enum):
    """Output formats every command accepts."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"


_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if code != 0x09}
"""Control characters (escape sequences, bells, carriage returns) -> a visible ``\\xNN``: text from
trace files and sidecars must never steer the terminal that shows it."""


def printable(text: str) -> str:
    """``text`` with every control character but tab shown as ``\\xNN``: nothing a terminal obeys."""
    return text.translate(_CONTROL)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:,.1f}"
    return printable(str(value))


def _rich_table(table: Table) -> RichTable:
    rich = RichTable()
    for name, dtype in table.frame.schema.items():
        rich.add_column(name, justify="right" if dtype.is_numeric() else "left")
    for row in table.frame.iter_rows():
        rich.add_row(*(Text(_cell(value)) for value in row))  # text, never markup: '[0, 1]' stays
    return rich


def emit(result: Result, fmt: Format, out_dir: Path | None = None) -> None:
    """Print ``result`` in ``fmt``; with ``out_dir``, also write result.json and one Parquet per table."""
    stderr = Console(stderr=True, highlight=False)
    for warning in result.warnings:
        stderr.print(f"[yellow]warning:[/yellow] {escape(printable(warning))}", soft_wrap=True)
    if fmt is Format.JSON:
        sys.stdout.buffer.write(to_json(result.payload) + b"\n")
    elif fmt is Format.CSV:
        for index, table in enumerate(t for t in result.tables if t.shown):
            if index:
                sys.stdout.write("\n")
            sys.stdout.write(table.frame.write_csv())
    else:
        console = Console(highlight=False)
        if not console.is_terminal:
            # Piped or redirected: no terminal width to honour, so never cut a column short.
            console = Console(highlight=False, width=_UNBOUNDED_WIDTH)
        for table in result.tables:
            if table.shown:
                # Title and notes are printed apart from the table so they wrap at the console's
                # width, not the table's.
                console.print(printable(table.title), style="bold", soft_wrap=True, markup=False)
                console.print(_rich_table(table))
                for note in table.notes:
                    console.print(printable(note), style="dim", soft_wrap=True, markup=False)
                console.print()
    if out_dir is not None:
        output_dir(out_dir)
        payload = to_json(result.payload) + b"\n"
        write_atomic(out_dir / "result.json", lambda path: path.write_bytes(payload))
        for table in result.tables:
            write_atomic(out_dir / f"{table.name}.parquet", table.frame.write_parquet)
