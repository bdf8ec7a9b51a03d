"""``tracekit stragglers DIR``: which ranks run which compute slower than their peers, and what it costs."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.options import format_option, meta_option, out_option
from tracekit.cli.output import Format, Result, Table, emit
from tracekit.cli.progress import load_run_with_progress
from tracekit.stragglers.report import NOTES, score_table, stragglers_payload
from tracekit.stragglers.scoring import StragglerConfig, score_stragglers
from tracekit.whatif.inputs import load_case
from tracekit.whatif.summary import clock_json


@click.command("stragglers")
@click.argument("source", type=click.Path(path_type=Path))
@meta_option
@click.option(
    "--threshold",
    type=float,
    default=StragglerConfig.threshold,
    show_default=True,
    help="Flag ranks whose score (peer median / own median) is below this.",
)
@format_option
@out_option
def command(source: Path, meta: Path | None, threshold: float, fmt: Format, out_dir: Path | None) -> None:
    """Rank and action kind whose compute is slower than peers' in SOURCE, most harmful first."""
    try:
        config = StragglerConfig(threshold=threshold)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--threshold") from None
    loaded = load_case(source, meta, load=load_run_with_progress)
    scores = score_stragglers(loaded.case, config)
    payload = stragglers_payload(scores, config, clock_json(loaded.clock))
    flagged = len(payload["stragglers"])
    tables = (
        Table(
            title=f"{source}: {flagged} straggler(s) below score {config.threshold}",
            frame=score_table(scores),
            notes=NOTES + tuple(row["summary"] for row in payload["stragglers"]),
            name="summary",
        ),
        Table(title="straggler scores", frame=scores, name="stragglers", shown=False),
    )
    emit(Result(payload=payload, tables=tables, warnings=loaded.warnings), fmt, out_dir)
