"""Options shared by several commands, declared once; the analysis's config tree as one options table.

``ANALYSIS_OPTIONS`` is every field of ``AnalysisConfig``'s components (``StragglerConfig``,
``LinkConfig``, ``WhatIfConfig``, ``IdealConfig``), read from the dataclasses themselves: a field
becomes ``--<component>-<field>`` (``FLAG_NAMES`` keeps the short names the commands have always
had), its type and default are the field's, its help the field's docstring. ``analysis_options``
puts them (and ``--pipelines``, ``--kernel-classes``) on a command, ``analysis_config`` builds the
``AnalysisConfig`` from what was given. No analysis option is declared anywhere else.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.analysis.choices import (
    IDEAL_DEFINITION,
    LAYOUT_HELP,
    OSDI25_DEFINITION,
    IdealConfig,
    LinkConfig,
    PipelineLayout,
    StragglerConfig,
    WhatIfConfig,
)
from tracekit.cli.output import Format
from tracekit.errors import TracekitError
from tracekit.perrank.engine import DaskEngine

if TYPE_CHECKING:
    from tracekit.run_analysis import AnalysisConfig

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice([f.value for f in Format]),
    default=Format.TABLE.value,
    show_default=True,
    callback=lambda _ctx, _param, value: Format(value),
    help="table for people, json for scripts, csv for spreadsheets.",
)

explain_option = click.option(
    "--explain", is_flag=True, help="Print what each column and figure means after the tables."
)

wide_option = click.option("--wide", is_flag=True, help="Show every column, however wide the terminal.")

out_option = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write result.json and one Parquet file per table into this directory.",
)

meta_option = click.option(
    "--meta",
    "meta",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Job metadata YAML of an op-table (default: the one meta*.yaml beside it).",
)


def _layout(_ctx: click.Context, _param: click.Parameter, value: str | None) -> PipelineLayout | None:
    if value is None:
        return None
    try:
        return PipelineLayout.parse(value)
    except ValueError as error:
        raise TracekitError(f"--pipelines: {error}") from None


pipelines_option = click.option(
    "--pipelines",
    "pipelines",
    metavar="contiguous:P|strided:P",
    default=None,
    callback=_layout,
    help=LAYOUT_HELP,
)

scheduler_option = click.option(
    "--scheduler",
    "engine",
    metavar="ADDRESS",
    default=None,
    callback=lambda _ctx, _param, value: None if value is None else DaskEngine(value),
    help="Run the per-rank parse and reductions on this Dask scheduler's workers (e.g. tcp://HOST:8786), "
    "which must read the traces at the same path; default: worker processes on this machine (docs/scale.md).",
)

COST_HELP = "cost of one micro-batch through one rank's share of the model (a stage of a v-chunk schedule costs it / v)"


def cost_options(command: click.Command) -> click.Command:
    """The --f/--b/--w/--fb/--comm options shared by simulate and sweep."""
    options = (
        click.option("--f", "f", type=float, default=1.0, show_default=True, help=f"Forward: {COST_HELP}."),
        click.option(
            "--b",
            "b",
            type=float,
            default=1.0,
            show_default=True,
            help="Backward for inputs (Zero Bubble's T_B); a full backward costs b + w.",
        ),
        click.option("--w", "w", type=float, default=1.0, show_default=True, help="Backward for weights."),
        click.option(
            "--fb", "fb", type=float, default=None, help="Overlapped F&B chunk [default: f + b + w]."
        ),
        click.option(
            "--comm",
            "comm",
            type=float,
            default=0.0,
            show_default=True,
            help="Latency per hop between ranks.",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


COMPONENTS: dict[str, type] = {
    "stragglers": StragglerConfig,
    "links": LinkConfig,
    "whatif": WhatIfConfig,
    "ideal": IdealConfig,
}
"""``AnalysisConfig`` field -> its component config, each field of which is an option."""

FLAG_NAMES: dict[tuple[str, str], str] = {
    ("stragglers", "threshold"): "--threshold",
    ("ideal", "method"): "--ideal",
    ("whatif", "replay"): "--replay",
}
"""Fields whose flag is not ``--<component>-<field>``: the names the commands shipped with."""

FLAG_HELP: dict[tuple[str, str], str] = {
    ("ideal", "method"): f"robust: {IDEAL_DEFINITION}. {OSDI25_DEFINITION} [default: osdi25 for op-tables, "
    "robust for runs].",
    ("whatif", "replay"): "recorded: every op its duration plus its recorded gap, so the realized replay is the "
    "measured step that tracekit stragglers prices; durations: durations alone, the OSDI'25 artifact's replay.",
}
"""Fields whose help says more than their docstring: the definitions the outputs quote."""


@dataclass(frozen=True)
class ConfigOption:
    """One config field as a command-line option."""

    component: str
    field: str
    flag: str
    kind: Any
    """click's type: float, int, or a Choice of a Literal's values."""
    default: Any

    @property
    def name(self) -> str:
        """The keyword the command receives it as."""
        return f"{self.component}_{self.field}"

    @property
    def help(self) -> str:
        """``FLAG_HELP``'s text, else the field's docstring (read from the source only when asked for)."""
        given = FLAG_HELP.get((self.component, self.field))
        if given is not None:
            return given
        return _field_docs(COMPONENTS[self.component]).get(self.field, "").replace("``", "")


@functools.cache
def _field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string right after its annotation), one line.

    Parsing the four config classes' source costs 13 to 17 ms (inspect, tokenize, ast): only ``--help``
    and the tests ask for it, never a command's start-up.
    """
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


class _FieldOption(click.Option):
    """A config field's option: its help text is looked up when help is shown, not when the command is built."""

    def __init__(self, *args: Any, row: ConfigOption, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.row = row

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if self.help is None:
            self.help = f"[{self.row.component}] {self.row.help}"
        return super().get_help_record(ctx)


def _kind(annotation: Any) -> Any:
    values = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    literal = [v for arg in values for v in typing.get_args(arg)] if values else []
    if typing.get_origin(annotation) is typing.Literal:
        return click.Choice([str(v) for v in typing.get_args(annotation)])
    if literal and all(isinstance(v, str) for v in literal):
        return click.Choice(literal)
    return annotation if annotation in (int, float, str) else (values[0] if values else annotation)


def _options() -> tuple[ConfigOption, ...]:
    rows = []
    for component, cls in COMPONENTS.items():
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            flag = FLAG_NAMES.get((component, item.name), f"--{component}-{item.name.replace('_', '-')}")
            rows.append(ConfigOption(component, item.name, flag, _kind(hints[item.name]), item.default))
    return tuple(rows)


ANALYSIS_OPTIONS: tuple[ConfigOption, ...] = _options()
"""Every component field of ``AnalysisConfig``, as the commands that analyse a run take it."""

kernel_classes_option = click.option(
    "--kernel-classes",
    "kernel_classes",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML or YAML file of extra kernel-class patterns, tried before the built-in table (docs/gpu.md).",
)


def analysis_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Put every ``ANALYSIS_OPTIONS`` row, ``--pipelines`` and ``--kernel-classes`` on ``command``."""
    for row in reversed(ANALYSIS_OPTIONS):
        command = click.option(
            row.flag,
            row.name,
            cls=_FieldOption,
            row=row,
            type=row.kind,
            default=row.default,
            show_default=row.default is not None,
        )(command)
    return kernel_classes_option(pipelines_option(command))


def analysis_config(values: dict[str, Any]) -> AnalysisConfig:
    """The ``AnalysisConfig`` of the options ``analysis_options`` added (popped from ``values``).

    Imports the analysis (and polars) only here: a command whose result is stored
    (``tracekit.cli.result_store``) prints it without building a config.
    """
    from tracekit.gpu.kernel_classes import KERNEL_PATTERNS, load_patterns
    from tracekit.run_analysis import AnalysisConfig

    parts: dict[str, dict[str, Any]] = {component: {} for component in COMPONENTS}
    for row in ANALYSIS_OPTIONS:
        parts[row.component][row.field] = values.pop(row.name)
    components = {}
    for component, cls in COMPONENTS.items():
        try:
            components[component] = cls(**parts[component])
        except ValueError as error:
            rows = [row for row in ANALYSIS_OPTIONS if row.component == component]
            named = [row.flag for row in rows if str(error).startswith(row.field)] or [row.flag for row in rows]
            raise click.BadParameter(str(error), param_hint=", ".join(named)) from None
    kernel_classes = values.pop("kernel_classes")
    patterns = load_patterns(kernel_classes) if kernel_classes is not None else KERNEL_PATTERNS
    return AnalysisConfig(kernel_patterns=patterns, pipelines=values.pop("pipelines"), **components)
