"""``tracekit stragglers DIR``: which ranks run their compute slower than their reference, and what it costs."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.options import format_option, meta_option, out_option
from tracekit.cli.output import Format, Result, Table, emit
from tracekit.cli.progress import load_run_with_progress
from tracekit.stragglers.links import slow_links
from tracekit.stragglers.report import describe, describe_link, heading, notes, rank_table, stragglers_payload
from tracekit.stragglers.scoring import StragglerConfig, score_stragglers
from tracekit.stragglers.work import stage_work
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
    help="Flag ranks whose score (reference / own duration) is below this.",
)
@format_option
@out_option
def command(source: Path, meta: Path | None, threshold: float, fmt: Format, out_dir: Path | None) -> None:
    """Ranks whose compute is slower than their peers' or their expected cost in SOURCE, most costly first."""
    try:
        config = StragglerConfig(threshold=threshold)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--threshold") from None
    loaded = load_case(source, meta, load=load_run_with_progress)
    manifest = loaded.manifest
    result = score_stragglers(
        loaded.case,
        config,
        stage_work(manifest, str(source)),
        world_size=None if manifest is None else manifest.world_size,
    )
    links = None
    if loaded.actions is not None:
        links = slow_links(loaded.actions, float(loaded.case.measured_ms().mean()))
    payload = stragglers_payload(result, clock_json(loaded.clock), links)
    unjudged = tuple(f"rank {row['rank']} not judged: {row['reason']}" for row in payload["unjudged"])
    tables = (
        Table(
            title=heading(str(source), result),
            frame=rank_table(result),
            notes=notes(config)
            + tuple(describe(row) for row in result.flagged.to_dicts())
            + tuple(describe_link(row) for row in payload["links"] if row["flagged"])
            + unjudged,
            name="ranks",
        ),
        Table(title="scores per rank and kind", frame=result.scores, name="stragglers", shown=False),
    )
    emit(Result(payload=payload, tables=tables, warnings=loaded.warnings), fmt, out_dir)
