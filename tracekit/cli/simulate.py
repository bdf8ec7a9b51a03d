"""``tracekit simulate``: the ideal timeline of a generated schedule, with its bubble and memory figures."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
import polars as pl

from tracekit.cli.options import explain_option, wide_option, cost_options, format_option, out_option
from tracekit.cli.output import Format, Result, Table, emit
from tracekit.cli.progress import working
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import DEFINITIONS, summarize
from tracekit.schedule.registry import GENERATORS, generate
from tracekit.schedule.sweep import ShareCosts, share_costs


@click.command("simulate")
@click.option(
    "--schedule", "name", type=click.Choice(list(GENERATORS)), required=True, help="Schedule to generate."
)
@click.option("--pp", type=int, required=True, help="Pipeline ranks (devices).")
@click.option("--microbatches", type=int, required=True, help="Micro-batches per step.")
@click.option("--chunks", type=int, default=None, help="Stages per rank for interleaved-1f1b [default: 2].")
@cost_options
@format_option
@explain_option
@wide_option
@out_option
def command(
    name: str,
    pp: int,
    microbatches: int,
    chunks: int | None,
    f: float,
    b: float,
    w: float,
    fb: float | None,
    comm: float,
    fmt: Format,
    explain: bool,
    wide: bool,
    out_dir: Path | None,
) -> None:
    """Simulate SCHEDULE on PP ranks with ideal costs: makespan, bubbles, activations."""
    with working("generating, simulating, summarizing", total=3) as advance:
        schedule = generate(name, pp, microbatches, chunks)
        advance()
        timeline = simulate(schedule, share_costs(schedule, ShareCosts(f, b, w, fb, comm)))
        advance()
        summary = summarize(timeline)
        advance()
    actions = timeline.to_frame()
    # The action table is serialized by polars, column-wise in Rust: a Python dict per action
    # took seconds at hundreds of thousands of actions; orjson embeds the bytes as they are.
    rows = orjson.Fragment(actions.drop("overlapped").write_json())
    payload = summary.to_payload() | {"schedule": rows}
    overview = pl.DataFrame(
        {
            "schedule": [name],
            "pp": [pp],
            "stages": [schedule.num_stages],
            "microbatches": [microbatches],
            "makespan": [summary.makespan],
            "bubble_rate": [summary.bubble_rate],
            "param_copies": [summary.param_copies],
        }
    )
    tables = (
        Table(title=f"{name}: ideal schedule", frame=overview, name="summary"),
        Table(
            title="per rank",
            frame=summary.ranks,
            notes=DEFINITIONS + ("times in the cost unit",),
            name="ranks",
        ),
        Table(title="simulated schedule", frame=actions, name="schedule", shown=False),
    )
    emit(Result(payload=payload, tables=tables), fmt, out_dir, explain=explain, wide=wide)
