"""The ``tracekit`` command: a click group whose subcommands live one per module in this package.

Each command's module is imported only when that command runs (or its own ``--help`` is asked
for): ``tracekit --help`` and every command start without the others' dependencies (altair for
``dashboard``, the planner's tables for ``plan``, ...). A new command is one line of ``COMMANDS``.

On two cores or fewer, a command's polars pool is one thread (``one_polars_thread``).
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from tracekit.cli.files import os_error_message
from tracekit.errors import TracekitError

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module in tracekit.cli defining ``command``, the line ``tracekit --help`` shows)
    "report": ("report", "Per-rank bubbles, GPU busy/idle and communication overlap."),
    "record": ("record", "Run a training command and capture one trace per rank."),
    "stragglers": ("stragglers", "Ranks slower than their peers or their expected cost."),
    "whatif": ("whatif", "Replay a run with ideal durations: slowdown and its causes."),
    "simulate": ("simulate", "Simulate a schedule with ideal costs: makespan, bubbles."),
    "sweep": ("sweep", "Compare schedules' bubbles and utilization (and GPU-hours)."),
    "dashboard": ("dashboard", "One offline HTML page of the run's charts."),
    "plan": ("plan", "Recommend pipeline depth, schedule and micro-batches."),
    "export": ("export", "Every rank on one aligned Perfetto timeline."),
    "diff": ("diff", "What changed between two runs, priced in step time."),
}
"""Every subcommand, loaded on first use; the listing needs no import."""

STARTS_JOBS = frozenset({"record"})
"""Commands that start the user's processes, which inherit their environment."""

ONE_THREAD_CORES = 2
"""Most cores on which a command's polars pool is one thread."""


def one_polars_thread(command: str) -> None:
    """Before ``command`` imports polars: on ``ONE_THREAD_CORES`` cores or fewer, its pool one thread
    (``POLARS_MAX_THREADS``, unless already set), except in a command that starts the user's job.

    There a rank's reductions (many small queries) cost 7% to 12% more CPU on two threads than on
    one (docs/performance.md), and the command reads ranks beside its one worker instead of
    starting two (``tracekit.perrank.engine.HelpedPool``).
    """
    if command not in STARTS_JOBS and (os.cpu_count() or 1) <= ONE_THREAD_CORES:
        os.environ.setdefault("POLARS_MAX_THREADS", "1")


class _Group(click.Group):
    """Loads each command's module when it is used; turns TracekitError, and any file a command
    could not read or write, into one line on stderr and exit status 2, never a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            one_polars_thread(cmd_name)
            module = importlib.import_module(f"tracekit.cli.{COMMANDS[cmd_name][0]}")
            self.add_command(module.command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, COMMANDS[name][1] if name in COMMANDS else self.commands[name].get_short_help_str())
            for name in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except TracekitError as error:
            click.echo(f"tracekit: error: {error}", err=True)
            sys.exit(2)
        except OSError as error:
            click.echo(f"tracekit: error: {os_error_message(error)}", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracekit")
def cli() -> None:
    """Measure what a pipeline-parallel training run really did."""


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="tracekit")
