"""``tracekit stragglers DIR``: which ranks run their compute slower than their reference, and what it costs."""

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
from tracekit.present.stragglers import stragglers_result


@click.command("stragglers")
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
    """Ranks whose compute is slower than their peers' or their expected cost in SOURCE, most costly first."""
    analysis = analyse_with_progress(source, analysis_config(options), meta=meta, engine=engine)
    emit(stragglers_result(analysis, str(source)), fmt, out_dir, explain=explain, wide=wide)
