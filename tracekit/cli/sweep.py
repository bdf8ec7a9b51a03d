"""``tracekit sweep``: simulate schedules over P and M at equal model cost, against a baseline."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli.options import explain_option, wide_option, cost_options, format_option, out_option
from tracekit.cli.output import Format, emit
from tracekit.cli.progress import working
from tracekit.present.schedule import sweep_result
from tracekit.schedule.metrics import DEFINITIONS
from tracekit.schedule.sweep import SWEEP_DEFINITIONS, ShareCosts, StepEconomics, compare_to_baseline, sweep


def _integers(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None


@click.command("sweep")
@click.option(
    "--schedules", default="1f1b,dualpipe", show_default=True, help="Comma-separated schedule names."
)
@click.option("--pp", "pps", default="8", show_default=True, help="Comma-separated pipeline ranks.")
@click.option("--microbatches", default="16", show_default=True, help="Comma-separated micro-batch counts.")
@click.option("--chunks", type=int, default=None, help="Stages per rank for interleaved-1f1b [default: 2].")
@click.option("--baseline", default="1f1b", show_default=True, help="Schedule the others are compared with.")
@click.option("--step-time", type=float, default=None, help="Measured step time of the baseline, seconds.")
@click.option("--tokens-per-step", type=int, default=None, help="Training tokens per step.")
@click.option("--gpus", type=int, default=None, help="GPUs of the whole job [default: the row's pp].")
@cost_options
@format_option
@explain_option
@wide_option
@out_option
def command(
    schedules: str,
    pps: str,
    microbatches: str,
    chunks: int | None,
    baseline: str,
    step_time: float | None,
    tokens_per_step: int | None,
    gpus: int | None,
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
    """Compare schedules' bubbles and utilization; with --step-time and --tokens-per-step, GPU-hours."""
    if (step_time is None) != (tokens_per_step is None):
        raise click.UsageError("--step-time and --tokens-per-step go together")
    names = [name for name in schedules.split(",") if name]
    if baseline not in names:
        names.insert(0, baseline)
    pp_values, microbatch_values = _integers(pps), _integers(microbatches)
    with working("simulating", total=len(names) * len(pp_values) * len(microbatch_values)) as advance:
        frame, skipped = sweep(
            names, pp_values, microbatch_values, ShareCosts(f, b, w, fb, comm), chunks, on_done=advance
        )
    notes = DEFINITIONS + SWEEP_DEFINITIONS
    if step_time is not None and tokens_per_step is not None:
        pp_values = set(frame["pp"].to_list())
        if gpus is None and len(pp_values) > 1:
            raise click.UsageError("give --gpus when sweeping several --pp values with --step-time")
        economics = StepEconomics(step_time, tokens_per_step, gpus or next(iter(pp_values)))
        notes += economics.definitions()
    else:
        economics = None
    table = compare_to_baseline(frame, baseline, economics)
    emit(sweep_result(table, baseline, notes, tuple(skipped)), fmt, out_dir, explain=explain, wide=wide)
