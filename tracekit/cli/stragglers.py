"""``tracekit stragglers DIR``: which ranks run their compute slower than their reference, and what it costs."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.analysis.pipelines import PipelineLayout
from tracekit.cli.options import explain_option, wide_option, format_option, meta_option, out_option, pipelines_option, scheduler_option
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.perrank.engine import Engine
from tracekit.present.stragglers import stragglers_result
from tracekit.run_analysis import AnalysisConfig
from tracekit.stragglers.scoring import StragglerConfig


@click.command("stragglers")
@click.argument("source", type=click.Path(path_type=Path))
@meta_option
@click.option(
    "--threshold",
    type=float,
    default=StragglerConfig.threshold,
    show_default=True,
    help="Flag ranks whose score (reference / own duration) is below this.",
)
@pipelines_option
@format_option
@explain_option
@wide_option
@out_option
@scheduler_option
def command(
    source: Path,
    meta: Path | None,
    threshold: float,
    pipelines: PipelineLayout | None,
    fmt: Format,
    explain: bool,
    wide: bool,
    out_dir: Path | None,
    engine: Engine | None,
) -> None:
    """Ranks whose compute is slower than their peers' or their expected cost in SOURCE, most costly first."""
    try:
        config = AnalysisConfig(stragglers=StragglerConfig(threshold=threshold), pipelines=pipelines)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--threshold") from None
    analysis = analyse_with_progress(source, config, meta=meta, engine=engine)
    emit(stragglers_result(analysis, str(source)), fmt, out_dir, explain=explain, wide=wide)
