"""``tracekit whatif DIR | OPTABLE.parquet``: slowdown against an idealized replay, and who causes it."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.options import format_option, meta_option, out_option
from tracekit.cli.output import Format, Result, Table, emit
from tracekit.cli.progress import load_run_with_progress
from tracekit.whatif.attribution import what_if
from tracekit.whatif.inputs import load_case
from tracekit.whatif.named import compare_named
from tracekit.whatif.summary import DEFINITIONS, attribution_table, step_table, whatif_payload


@click.command("whatif")
@click.argument("source", type=click.Path(path_type=Path))
@meta_option
@format_option
@out_option
def command(source: Path, meta: Path | None, fmt: Format, out_dir: Path | None) -> None:
    """Replay SOURCE with typical durations: slowdown S and its attribution (OSDI'25 what-if)."""
    loaded = load_case(source, meta, load=load_run_with_progress)
    result = what_if(loaded.case)
    named, named_warnings = (None, ())
    if loaded.case.source == "kineto":
        named, named_warnings = compare_named(loaded.case, loaded.manifest, result)
    payload = whatif_payload(result, loaded.case.source, loaded.clock, named)
    tables = [
        Table(
            title=f"{source}: S = {payload['slowdown']:.3f}",
            frame=attribution_table(result),
            notes=tuple(f"{k}: {v}" for k, v in DEFINITIONS.items()) + tuple(payload["findings"]),
            name="attribution",
        ),
        Table(title="steps (ms)", frame=step_table(result), name="steps", shown=False),
        Table(title="per-step attribution", frame=result.per_step, name="per_step", shown=False),
    ]
    if loaded.clock is not None:
        tables.append(Table(title="clock offsets", frame=loaded.clock.offsets, name="clock", shown=False))
    emit(
        Result(payload=payload, tables=tuple(tables), warnings=loaded.warnings + named_warnings), fmt, out_dir
    )
