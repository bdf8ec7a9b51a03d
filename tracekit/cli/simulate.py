"""``tracekit simulate``: the ideal timeline of a generated schedule, with its bubble and memory figures."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.options import explain_option, wide_option, cost_options, format_option, out_option
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import working
from tracekit.errors import TracekitError
from tracekit.present.schedule import deadlock_grid, simulate_result
from tracekit.schedule.engine import ScheduleDeadlock, simulate
from tracekit.schedule.metrics import summarize
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
        try:
            timeline = simulate(schedule, share_costs(schedule, ShareCosts(f, b, w, fb, comm)))
        except ScheduleDeadlock as deadlock:
            raise TracekitError(deadlock_grid(deadlock)) from None
        advance()
        summary = summarize(timeline)
        advance()
    emit(simulate_result(name, schedule, timeline, summary), fmt, out_dir, explain=explain, wide=wide)
