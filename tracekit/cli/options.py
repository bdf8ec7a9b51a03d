"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.output import Format

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice([f.value for f in Format]),
    default=Format.TABLE.value,
    show_default=True,
    callback=lambda _ctx, _param, value: Format(value),
    help="table for people, json for scripts, csv for spreadsheets.",
)

out_option = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write result.json and one Parquet file per table into this directory.",
)
