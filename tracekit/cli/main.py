"""The ``tracekit`` command: a click group whose subcommands live one per module in this package."""

from __future__ import annotations

import sys

import click

from tracekit.cli.files import os_error_message
from tracekit.errors import TracekitError


class _Group(click.Group):
    """Turns TracekitError, and any file a command could not read or write, into one line on
    stderr and exit status 2, never a traceback."""

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


def _register() -> None:
    from tracekit.cli import dashboard, plan, record, report, simulate, stragglers, sweep, whatif
    from tracekit.cli import diff

    for module in (report, record, stragglers, whatif, simulate, sweep, dashboard, plan, diff):
        cli.add_command(module.command)


_register()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="tracekit")
