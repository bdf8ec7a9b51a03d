"""``tracekit whatif DIR | OPTABLE.parquet``: slowdown against an idealized replay, and who causes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli.options import (
    analysis_config,
    analysis_options,
    explain_option,
    format_option,
    meta_option,
    out_option,
    scheduler_option,
    wide_option,
)
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.perrank.engine import Engine
from tracekit.present.whatif import whatif_result


@click.command("whatif")
@click.argument("source", type=click.Path(path_type=Path))
@meta_option
@analysis_options
@format_option
@explain_option
@wide_option
@out_option
@scheduler_option
def command(
    source: Path,
    meta: Path | None,
    fmt: Format,
    explain: bool,
    wide: bool,
    out_dir: Path | None,
    engine: Engine | None,
    **options: Any,
) -> None:
    """Replay SOURCE with ideal durations: slowdown S and its attribution (OSDI'25 what-if)."""
    analysis = analyse_with_progress(source, analysis_config(options), meta=meta, engine=engine)
    emit(whatif_result(analysis, str(source)), fmt, out_dir, explain=explain, wide=wide)
