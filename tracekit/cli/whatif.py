"""``tracekit whatif DIR | OPTABLE.parquet``: slowdown against an idealized replay, and who causes it."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.analysis.ideal import IDEAL_DEFINITION, OSDI25_DEFINITION, IdealConfig
from tracekit.analysis.pipelines import PipelineLayout
from tracekit.cli.options import format_option, meta_option, out_option, pipelines_option, scheduler_option
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.perrank.engine import Engine
from tracekit.present.whatif import whatif_result
from tracekit.run_analysis import AnalysisConfig
from tracekit.whatif.attribution import REPLAYS, WhatIfConfig


@click.command("whatif")
@click.argument("source", type=click.Path(path_type=Path))
@meta_option
@click.option(
    "--ideal",
    "ideal_method",
    type=click.Choice(["robust", "osdi25"]),
    default=None,
    help=f"robust: {IDEAL_DEFINITION}. {OSDI25_DEFINITION} [default: osdi25 for op-tables, robust for runs].",
)
@click.option(
    "--replay",
    type=click.Choice(list(REPLAYS)),
    default="recorded",
    show_default=True,
    help="recorded: every op its duration plus its recorded gap, so the realized replay is the measured step "
    "that tracekit stragglers prices; durations: durations alone, the OSDI'25 artifact's replay.",
)
@pipelines_option
@format_option
@out_option
@scheduler_option
def command(
    source: Path,
    meta: Path | None,
    ideal_method: str | None,
    replay: str,
    pipelines: PipelineLayout | None,
    fmt: Format,
    out_dir: Path | None,
    engine: Engine | None,
) -> None:
    """Replay SOURCE with ideal durations: slowdown S and its attribution (OSDI'25 what-if)."""
    config = AnalysisConfig(
        ideal=IdealConfig(method=ideal_method),  # type: ignore[arg-type]
        whatif=WhatIfConfig(replay=replay),  # type: ignore[arg-type]
        pipelines=pipelines,
    )
    analysis = analyse_with_progress(source, config, meta=meta, engine=engine)
    emit(whatif_result(analysis, str(source)), fmt, out_dir)
