"""``tracekit record --out DIR [--steps A:B] -- COMMAND ...``: capture an unmodified training job.

Parses arguments, hands the work to ``collectors.launch.record`` (inject, run, merge) and shows
the merged manifest through the output layer. Exits with the command's own exit status, except
when the command succeeded but no rank captured anything: then ``NOTHING_CAPTURED_EXIT`` (4).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import click
import polars as pl

from collectors.launch import NOTHING_CAPTURED_EXIT, STOP_GRACE_S, record
from collectors.manifest import Manifest
from collectors.verdict import failure_line
from collectors.window import DEFAULT_STEPS, parse_steps
from tracekit.cli.live import live_options, live_result, options_from
from tracekit.cli.options import format_option
from tracekit.cli.output import Format, Result, Table, emit
from tracekit.errors import TracekitError
from tracekit.live.session import record_live

_RANK_COLUMNS: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "complete": pl.Boolean(),
    "trace": pl.String(),
    "host": pl.String(),
    "problem": pl.String(),
}


def _check_steps(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        parse_steps(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return value


def _rank_table(manifest: Manifest) -> pl.DataFrame:
    rows = [
        {
            "rank": entry.rank,
            "complete": entry.complete,
            "trace": entry.trace,
            "host": entry.host,
            "problem": "; ".join(entry.problems) or None,
        }
        for entry in manifest.ranks
    ]
    return pl.DataFrame(rows, schema=_RANK_COLUMNS)


def _interruption_lines(manifest: Manifest) -> tuple[str, ...]:
    stop = manifest.interruption
    if stop is None:
        return ()
    how = (
        "killed at once by a second Ctrl-C"
        if stop.killed_at_once
        else "killed after the grace time"
        if stop.killed_after_grace
        else "stopped within the grace time"
    )
    return (f"interrupted by {stop.signal}: the job was {how}; steps that did not finish are not counted",)


def _emit_if_anyone_reads(result: Result, fmt: Format) -> None:
    """``emit``, unless what reads record's output is gone: the capture is on disk by now and the
    exit status must stay the job's (a closed terminal, ``| tee log`` stopped by the same Ctrl-C)."""
    try:
        emit(result, fmt)
        sys.stdout.flush()
    # BrokenPipeError, or EIO from a terminal that was closed; rich answers a broken pipe itself
    # with SystemExit(1), which would replace the job's status.
    except (OSError, SystemExit):
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                os.dup2(devnull, stream.fileno())  # so the flush at exit cannot fail either
        os.close(devnull)


@click.command("record", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for rank{r}.json.gz (one Kineto trace per rank) and run.json.",
)
@click.option(
    "--steps",
    default=DEFAULT_STEPS,
    show_default=True,
    callback=_check_steps,
    help="Steps to capture: A:B (half-open, 0-based; a step is one call of a schedule's step()), A: or all. "
    "The default skips step 0, which carries one-off set-up work.",
)
@click.option(
    "--stop-grace",
    "grace_s",
    type=click.FloatRange(min=0),
    default=STOP_GRACE_S,
    show_default=True,
    help="Seconds the job gets to write its traces after Ctrl-C or SIGTERM before it is killed.",
)
@live_options
@format_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def command(
    ctx: click.Context,
    out_dir: Path,
    steps: str,
    grace_s: float,
    fmt: Format,
    command: tuple[str, ...],
    live: bool,
    **live_args: Any,
) -> None:
    """Run COMMAND (python or torchrun) and capture one trace per rank, without changing its code."""
    if live:
        options = options_from(live_args, view=fmt == Format.TABLE)
        explicit = ctx.get_parameter_source("steps") != click.core.ParameterSource.DEFAULT
        try:
            outcome = record_live(command, out_dir, steps if explicit else None, options)
        except OSError as error:
            raise TracekitError(f"cannot run {command[0]!r}: {error.strerror or error}") from None
        _emit_if_anyone_reads(live_result(outcome, out_dir), fmt)
        ctx.exit(outcome.exit_code)
    try:
        outcome = record(command, out_dir, steps, grace_s)
    except OSError as error:
        raise TracekitError(f"cannot run {command[0]!r}: {error.strerror or error}") from None
    if outcome.manifest is not None:
        manifest = outcome.manifest
        complete = sum(entry.complete for entry in manifest.ranks)
        title = (
            f"{out_dir}: {complete} of {manifest.world_size} ranks captured (exit status {outcome.exit_code})"
        )
        if outcome.nothing_captured:
            title = f"{out_dir}: nothing captured; the job itself succeeded (exit status 0)"
        table = Table(title=title, frame=_rank_table(manifest), name="ranks")
        warnings = (
            manifest.problems + manifest.collector_problems + _interruption_lines(manifest) + manifest.notes
        )
        verdict = failure_line(manifest)
        if verdict is not None:
            warnings = (*warnings, verdict)
        _emit_if_anyone_reads(Result(payload=manifest.to_json(), tables=(table,), warnings=warnings), fmt)
    ctx.exit(NOTHING_CAPTURED_EXIT if outcome.nothing_captured else outcome.exit_code)
