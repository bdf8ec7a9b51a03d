"""The one place that prints command results: rich tables, JSON or CSV.

Commands take a ``Result`` (a JSON payload plus the tables a person reads) from
``tracekit.present`` and hand it to ``emit``; they never print or format by themselves.
"""

from __future__ import annotations

import math
import os
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


def decimals_of(values: list[Any]) -> int:
    """Decimals for a whole float column, so its values line up: 1 from 100 up, 2 from 1, else 3."""
    finite = [abs(v) for v in values if isinstance(v, float) and math.isfinite(v)]
    largest = max(finite, default=0.0)
    return 1 if largest >= 100 else 2 if largest >= 1 else 3


def _cell(value: Any, decimals: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{decimals}f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return printable(str(value))


def _rich_table(table: Table, wide: bool) -> RichTable:
    frame = table.terminal_frame(wide)
    rich = RichTable()
    decimals = []
    for name, dtype in frame.schema.items():
        rich.add_column(table.header(name), justify="right" if dtype.is_numeric() else "left")
        decimals.append(decimals_of(frame[name].to_list()) if dtype.is_float() else 0)
    for row in frame.iter_rows():
        # text, never markup: '[0, 1]' stays
        rich.add_row(*(Text(_cell(value, places)) for value, places in zip(row, decimals, strict=True)))
    return rich


def _hint(result: Result, explain: bool, wide: bool) -> str:
    """The closing line naming the flags that show more, when there is more to show."""
    hidden = not wide and any(
        table.shown and table.terminal_frame(False).width < table.frame.width for table in result.tables
    )
    more = [
        *(["--explain defines the columns"] if result.definitions and not explain else []),
        *(["--wide shows every column"] if hidden else []),
    ]
    return "; ".join(more) + "." if more else ""


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped or redirected with no width asked for: never cut a column short.
        console = Console(highlight=False, width=_UNBOUNDED_WIDTH)
    return console


def emit(
    result: Result, fmt: Format, out_dir: Path | None = None, *, explain: bool = False, wide: bool = False
) -> None:
    """Print ``result`` in ``fmt``: the headline, the tables, and with ``explain`` the definitions;
    with ``wide`` every column. With ``out_dir``, also write result.json and one Parquet per table."""
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
        console = _console()
        for line in result.headline:
            console.print(line, style="bold", markup=False)
        if result.headline:
            console.print()
        for table in result.tables:
            if table.shown:
                # Title and notes are printed apart from the table so they wrap at the console's
                # width, not the table's.
                console.print(printable(table.title), style="bold", soft_wrap=True, markup=False)
                console.print(_rich_table(table, wide))
                for note in table.notes:
                    console.print(printable(note), style="dim", soft_wrap=True, markup=False)
                console.print()
        if explain:
            for line in result.definitions:
                console.print(line, style="dim", markup=False)
        hint = _hint(result, explain, wide)
        if hint:
            console.print(hint, style="dim", markup=False)
    if out_dir is not None:
        output_dir(out_dir)
        payload = to_json(result.payload) + b"\n"
        write_atomic(out_dir / "result.json", lambda path: path.write_bytes(payload))
        for table in result.tables:
            write_atomic(out_dir / f"{table.name}.parquet", table.frame.write_parquet)
