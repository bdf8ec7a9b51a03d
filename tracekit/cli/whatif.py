"""``tracekit whatif DIR | OPTABLE.parquet``: slowdown against an idealized replay, and who causes it."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.analysis.ideal import IdealConfig
from tracekit.analysis.pipelines import PipelineLayout
from tracekit.cli.options import explain_option, wide_option, format_option, meta_option, out_option, pipelines_option, scheduler_option
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import analyse_with_progress
from tracekit.perrank.engine import Engine
from tracekit.present.whatif import whatif_result
from tracekit.run_analysis import AnalysisConfig


@click.command("whatif")
@click.argument("source", type=click.Path(path_type=Path))
@meta_option
@click.option(
    "--ideal",
    "ideal_method",
    type=click.Choice(["robust", "osdi25"]),
    default=None,
    help="robust: each op at the median of the other ranks doing the same work; osdi25: the OSDI'25 "
    "artifact's mean per op type over the whole run [default: osdi25 for op-tables, robust for runs].",
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
    ideal_method: str | None,
    pipelines: PipelineLayout | None,
    fmt: Format,
    explain: bool,
    wide: bool,
    out_dir: Path | None,
    engine: Engine | None,
) -> None:
    """Replay SOURCE with ideal durations: slowdown S and its attribution (OSDI'25 what-if)."""
    config = AnalysisConfig(ideal=IdealConfig(method=ideal_method), pipelines=pipelines)  # type: ignore[arg-type]
    analysis = analyse_with_progress(source, config, meta=meta, engine=engine)
    emit(whatif_result(analysis, str(source)), fmt, out_dir, explain=explain, wide=wide)
