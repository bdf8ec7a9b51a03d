"""Replace the planner's bytes per parameter and per micro-batch by what a captured run measured.

``tracekit plan --calibrate DIR`` takes, besides the times (``tracekit.planner.calibrate``), the
run's memory (``tracekit.analysis.memory``'s per-stage frame, ``RunAnalysis.memory.stages``):

- bytes per parameter: the run's parameter, gradient and optimizer-state bytes over its parameters
  (summed over the stages the sidecars weighed) replace the spec's ``param_bytes``, ``grad_bytes``
  and ``optimizer_bytes`` (an optimizer that keeps no state leaves ``optimizer_bytes`` as it was,
  and says so);
- bytes per micro-batch: per stage, measured bytes per micro-batch / the planner's estimate of
  the activations that stage saves for the run's own layout (the spec's model cut into the run's
  stages along a path); the median over stages multiplies the spec's ``activation_bytes``, so at
  the captured layout the measured bytes replace the estimate and elsewhere they correct it.

The spec must describe the model the run trained; nothing here can check that. Not for: times.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import polars as pl

from tracekit.planner.costs import layout, stage_positions
from tracekit.planner.spec import PlanSpec
from tracekit.schedule.model import ScheduleError
from tracekit.schedule.realized import schedule_from_realized


def _per_parameter(stages: pl.DataFrame) -> tuple[float, float, float] | None:
    weighed = stages.filter(pl.col("params").is_not_null() & (pl.col("params") > 0))
    if weighed.is_empty():
        return None
    params = float(weighed["params"].sum())
    columns = ("param_bytes", "grad_bytes", "optimizer_bytes")
    param, grad, optimizer = (float(weighed[column].sum()) / params for column in columns)
    return param, grad, optimizer


def memory_calibration(
    spec: PlanSpec, actions: pl.DataFrame, stages: pl.DataFrame
) -> tuple[PlanSpec, tuple[str, ...]]:
    """The spec with the run's measured bytes and notes on what changed; unchanged (noted) without memory."""
    if stages.is_empty():
        return spec, ("memory not calibrated: the calibration run recorded no memory events",)
    training, notes = spec.training, []
    per_parameter = _per_parameter(stages)
    if per_parameter is None:
        notes.append("bytes per parameter not calibrated: the run's sidecars weighed no stage")
    else:
        param, grad, optimizer = per_parameter
        if optimizer > 0:
            training = replace(training, param_bytes=param, grad_bytes=grad, optimizer_bytes=optimizer)
        else:
            training = replace(training, param_bytes=param, grad_bytes=grad)
            notes.append("the run's optimizer keeps no state: optimizer_bytes kept from the spec")
        notes.append(
            f"bytes per parameter from the run: params {param:.3g}, grads {grad:.3g}, "
            f"optimizer {training.optimizer_bytes:.3g}"
        )
    try:
        captured = schedule_from_realized(actions, step=int(actions["step"].min()))  # type: ignore[arg-type]
    except ScheduleError as error:
        notes.append(f"bytes per micro-batch not calibrated: the run cannot be read as a schedule ({error})")
        return replace(spec, training=training), tuple(notes)
    path_stages = captured.num_ranks * captured.stages_per_rank
    if path_stages <= spec.model.layers:
        estimated = layout(spec, path_stages).figures
        positions = stage_positions(captured)
        ratios = [
            row["bytes_per_microbatch"] / estimated[positions[row["stage"]]].activation_bytes
            for row in stages.iter_rows(named=True)
            if row["stage"] < len(positions)
            and row["bytes_per_microbatch"] > 0
            and estimated[positions[row["stage"]]].activation_bytes > 0
        ]
        if ratios:
            factor = statistics.median(ratios)
            training = replace(training, activation_bytes=training.activation_bytes * factor)
            notes.append(
                f"activation bytes x {factor:.3g} "
                "(measured bytes per micro-batch / estimated, median over stages)"
            )
    else:
        notes.append(
            f"bytes per micro-batch not calibrated: {path_stages} stages along a path, "
            f"the model has {spec.model.layers} layers"
        )
    return replace(spec, training=training), tuple(notes)
