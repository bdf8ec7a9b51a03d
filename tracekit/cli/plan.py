"""``tracekit plan``: recommend a pipeline depth, schedule and micro-batch count for a cluster and a model."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracekit.cli.options import explain_option, wide_option
from tracekit.cli.output import Format, emit
from tracekit.planner.calibrate import calibration_scale, hardware_notes
from tracekit.planner.calibrate_memory import memory_calibration
from tracekit.planner.costs import UNSCALED
from tracekit.planner.plan import plan
from tracekit.planner.presets import MODELS
from tracekit.planner.spec import load_spec
from tracekit.present.plan import plan_result
from tracekit.present.plan_markdown import render
from tracekit.run_analysis import analyse

FIELD_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("cluster", "gpus", int, "GPUs of the whole job."),
    ("cluster", "gpus_per_node", int, "GPUs per node."),
    ("cluster", "intra_node_gbps", float, "NVLink bandwidth per GPU, GB/s."),
    ("cluster", "inter_node_gbps", float, "Network bandwidth per GPU, GB/s."),
    ("cluster", "gpu_memory_gib", float, "Memory per GPU, GiB."),
    ("cluster", "achievable_tflops", float, "Achievable TFLOP/s per GPU [default: mfu x peak]."),
    ("model", "layers", int, "Transformer layers."),
    ("model", "hidden", int, "Hidden size."),
    ("model", "heads", int, "Attention heads."),
    ("model", "ffn", int, "Dense FFN intermediate size."),
    ("model", "experts", int, "Routed experts per MoE layer (0: dense)."),
    ("model", "experts_per_token", int, "Routed experts per token."),
    ("model", "expert_ffn", int, "Intermediate size of one expert."),
    ("training", "sequence_length", int, "Tokens per sequence."),
    ("training", "micro_batch_size", int, "Sequences per micro-batch."),
    ("training", "global_batch", int, "Sequences per optimizer step."),
    ("training", "ep", int, "Expert-parallel degree."),
    ("training", "pp", int, "Pipeline depth [default: every feasible depth]."),
)
"""(spec section, field, type, help) of each --flag that overrides one spec field; the flag is the field's name."""


def _field_options(command: click.Command) -> click.Command:
    for section, name, kind, text in reversed(FIELD_FLAGS):
        flag = "--" + name.replace("_", "-")
        command = click.option(flag, name, type=kind, default=None, help=f"[{section}] {text}")(command)
    return command


@click.command("plan")
@click.option(
    "--spec", "spec_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Spec TOML."
)
@click.option(
    "--model", "model_preset", type=click.Choice(sorted(MODELS)), default=None, help="Model preset."
)
@click.option(
    "--cluster", "cluster_preset", default=None, help="Cluster preset GPU-COUNT, e.g. h800-2048, h100-1024."
)
@click.option(
    "--calibrate",
    "calibrate_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Captured run whose measured per-action costs replace the estimates.",
)
@_field_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["markdown", "json", "table"]),
    default="markdown",
    show_default=True,
    help="markdown report, json for scripts, table for the terminal.",
)
@explain_option
@wide_option
def command(
    spec_path: Path | None,
    model_preset: str | None,
    cluster_preset: str | None,
    calibrate_dir: Path | None,
    fmt: str,
    explain: bool,
    wide: bool,
    **fields: object,
) -> None:
    """Recommend pipeline depth, schedule and micro-batches by simulating every feasible candidate.

    Exits 1 when no candidate fits, after printing why.
    """
    overrides: dict[str, dict[str, object]] = {"cluster": {}, "model": {}, "training": {}}
    for section, name, _, _ in FIELD_FLAGS:
        overrides[section][name] = fields[name]
    spec = load_spec(spec_path, model_preset, cluster_preset, overrides)
    scale, notes = UNSCALED, ()
    if calibrate_dir is not None:
        # The calibration run's actions on its one clock, as every other command reads them.
        analysis = analyse(calibrate_dir)
        scale, notes = calibration_scale(spec, analysis.actions)
        spec, memory_notes = memory_calibration(spec, analysis.actions, analysis.memory.stages)
        notes = memory_notes + notes
        hardware = hardware_notes(analysis.has_gpu, spec)
        for warning in hardware:
            click.echo(f"warning: {warning}", err=True)
        warnings = (*hardware, *analysis.run_warnings, *analysis.realized.warnings)
        notes = tuple(f"calibration run warning: {w}" for w in warnings) + notes
    outcome = plan(spec, scale, notes)
    if fmt == "markdown":
        sys.stdout.write(render(outcome))
    else:
        emit(plan_result(outcome), Format(fmt), explain=explain, wide=wide)
    if outcome.recommendation is None:
        sys.exit(1)
