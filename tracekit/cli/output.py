"""The one place that prints command results: rich tables, JSON or CSV.

Commands take a ``Result`` (a JSON payload plus the tables a person reads) from
``tracekit.present`` and hand it to ``emit``; they never print or format by themselves. ``emit``
turns the result into what is printed (``tracekit.present.printed``) and ``show`` prints that,
which is also how a stored result is printed again (``tracekit.cli.result_store``).
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path

from typing import TYPE_CHECKING

from tracekit.cli.files import output_dir, write_atomic
from tracekit.present.printed import Printed, PrintedTable, printed
from tracekit.present.result import Result, Table, to_json

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table as RichTable

__all__ = ["Format", "Printed", "Result", "Table", "emit", "show", "to_json"]

_UNBOUNDED_WIDTH = 400
"""Console width when stdout is not a terminal: wide enough that no table is truncated."""


class Format(str, Enum):
    """Output formats every command accepts."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"


def _rich_table(table: PrintedTable, wide: bool) -> RichTable:
    from rich.table import Table as RichTable  # here: rich is for a person's tables, not JSON or CSV
    from rich.text import Text

    columns = table.shown(wide)
    rich = RichTable()
    for column in columns:
        rich.add_column(column.header, justify="right" if column.right else "left")
    for row in zip(*(column.cells for column in columns), strict=True):
        # text, never markup: '[0, 1]' stays
        rich.add_row(*(Text(text) for text in row))
    return rich


def _hint(result: Printed, explain: bool, wide: bool) -> str:
    """The closing line naming the flags that show more, when there is more to show."""
    hidden = not wide and any(table.narrowed for table in result.tables)
    more = [
        *(["--explain defines the columns"] if result.definitions and not explain else []),
        *(["--wide shows every column"] if hidden else []),
    ]
    return "; ".join(more) + "." if more else ""


def _console() -> Console:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped or redirected with no width asked for: never cut a column short.
        console = Console(highlight=False, width=_UNBOUNDED_WIDTH)
    return console


def show(result: Printed, fmt: Format, *, explain: bool = False, wide: bool = False) -> None:
    """Print ``result`` in ``fmt``: the headline, the tables, and with ``explain`` the definitions;
    with ``wide`` every column."""
    if result.warnings:
        from rich.console import Console
        from rich.markup import escape

        stderr = Console(stderr=True, highlight=False)
        for warning in result.warnings:
            stderr.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)
    if fmt is Format.JSON:
        sys.stdout.buffer.write(result.json + b"\n")
    elif fmt is Format.CSV:
        sys.stdout.write("\n".join(table.csv for table in result.tables))
    else:
        console = _console()
        for line in result.headline:
            console.print(line, style="bold", markup=False)
        if result.headline:
            console.print()
        for table in result.tables:
            # Title and notes are printed apart from the table so they wrap at the console's
            # width, not the table's.
            console.print(table.title, style="bold", soft_wrap=True, markup=False)
            console.print(_rich_table(table, wide))
            for note in table.notes:
                console.print(note, style="dim", soft_wrap=True, markup=False)
            console.print()
        if explain:
            for line in result.definitions:
                console.print(line, style="dim", markup=False)
        hint = _hint(result, explain, wide)
        if hint:
            console.print(hint, style="dim", markup=False)


def emit(
    result: Result, fmt: Format, out_dir: Path | None = None, *, explain: bool = False, wide: bool = False
) -> Printed:
    """Print ``result`` in ``fmt`` (``show``); with ``out_dir``, also write result.json and one
    Parquet per table. Returns what was printed, for a command that keeps it."""
    shown = printed(result)
    show(shown, fmt, explain=explain, wide=wide)
    if out_dir is not None:
        output_dir(out_dir)
        payload = shown.json + b"\n"
        write_atomic(out_dir / "result.json", lambda path: path.write_bytes(payload))
        for table in result.tables:
            write_atomic(out_dir / f"{table.name}.parquet", table.frame.write_parquet)
    return shown
