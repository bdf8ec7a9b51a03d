"""A rank's memory findings: its highest step, in-flight count against the simulator, and what to say.

``rank_summary`` turns one rank's frames (``tracekit.analysis.memory``) into a ``RANK_MEMORY_SCHEMA``
row: the step with the highest peak and its prediction, whether the rank holds more than its
schedule needs, whether it is near its device's capacity, and the finding in words (the
definitions are ``tracekit.analysis.memory.DEFINITIONS``, quoted in docs/memory.md).

Not for: measuring (``tracekit.analysis.memory``) or presenting (``tracekit.present.memory``).
"""

from __future__ import annotations

import polars as pl

from collectors.manifest import RankMemory
from tracekit.analysis.memory import KEPT_NOTED, NEAR_CAPACITY, RankFrames

RANK_MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "peak_bytes": pl.Int64(),
    "predicted_bytes": pl.Int64(),
    "difference_pct": pl.Float64(),
    "differing_part": pl.String(),
    "peak_in_flight": pl.Float64(),
    "simulated_peak_in_flight": pl.Float64(),
    "param_bytes": pl.Int64(),
    "grad_bytes": pl.Int64(),
    "optimizer_bytes": pl.Int64(),
    "bytes_per_microbatch": pl.Int64(),
    "capacity_bytes": pl.Int64(),
    "near_capacity": pl.Boolean(),
    "holds_more_than_schedule": pl.Boolean(),
    "finding": pl.String(),
}
"""Per rank: its highest step peak with that step's prediction and differing part, the most
micro-batches it held in flight over the steps beside the simulator's peak, its stages' state
bytes (null without a sidecar), bytes per micro-batch (summed over its stages), the device's
capacity (null on CPU), whether the peak is within NEAR_CAPACITY of it, whether the rank holds more
than its schedule needs (more micro-batches in flight than simulated, or an extra activation
kept), and the finding in words (null when there is nothing to say)."""

PART_NAMES: dict[str, str] = {
    "params": "parameters",
    "gradients": "gradients",
    "optimizer": "optimizer state",
    "activations": "activations in flight",
    "kept": "bytes kept past their backward",
    "rest": "the rest (batch, buffers, transients, copies)",
}
"""How each part of a peak is named in findings."""


def mib(value: float) -> str:
    """Bytes as MiB with two decimals, the unit every memory figure prints in."""
    return f"{value / 2**20:.2f} MiB"


def _finding(step: dict, stages: pl.DataFrame, held_more: bool, near: bool) -> str | None:
    said: list[str] = []
    if held_more:
        said.append(
            f"held {step['peak_in_flight']:g} micro-batches in flight, its schedule needs "
            f"{step['simulated_peak_in_flight']:g}: it waited"
        )
    for row in stages.filter(pl.col("extra_kept_microbatches") > 0).iter_rows(named=True):
        said.append(
            f"stage {row['stage']} keeps {mib(row['extra_kept_bytes'])} of a forward into the next step, "
            f"beyond what its other micro-batches leave ({row['extra_kept_microbatches']} time(s)): "
            "an extra activation held, more than its schedule needs"
        )
    noted = stages.filter(pl.col("kept_per_microbatch") > KEPT_NOTED * pl.col("bytes_per_microbatch"))
    for row in noted.iter_rows(named=True):
        said.append(
            f"stage {row['stage']} keeps {mib(row['kept_per_microbatch'])} of every micro-batch's forward "
            "past its backward for inputs (held for a later W, a pending send or the step's output), "
            "which the in-flight count does not cover"
        )
    if step["differing_part"] is not None:
        said.append(
            f"peak {step['difference_pct']:+.0f}% against the prediction; "
            f"{PART_NAMES[step['differing_part']]} differ most"
        )
    if near:
        said.append(f"within {NEAR_CAPACITY:.0%} of the device's capacity")
    return "; ".join(said) or None


def rank_summary(frames: RankFrames, memory: RankMemory | None) -> dict:
    """One RANK_MEMORY_SCHEMA row from a rank's frames."""
    steps, stages = frames.steps, frames.stages
    worst = steps.sort("peak_bytes", descending=True).row(0, named=True)
    capacity = memory.capacity_bytes if memory is not None else None
    near = capacity is not None and worst["peak_bytes"] >= (1 - NEAR_CAPACITY) * capacity
    simulated = worst["simulated_peak_in_flight"]
    most = float(steps["peak_in_flight"].max())  # type: ignore[arg-type]
    held_more = simulated is not None and most > simulated + 1e-9
    extra = bool((stages["extra_kept_microbatches"] > 0).any())
    worst = {**worst, "peak_in_flight": most}
    has_state = memory is not None and bool(memory.stages)

    def state(column: str) -> int | None:
        return int(stages[column].sum()) if has_state else None

    return {
        "rank": worst["rank"],
        "peak_bytes": worst["peak_bytes"],
        "predicted_bytes": worst["predicted_bytes"],
        "difference_pct": worst["difference_pct"],
        "differing_part": worst["differing_part"],
        "peak_in_flight": most,
        "simulated_peak_in_flight": simulated,
        "param_bytes": state("param_bytes"),
        "grad_bytes": state("grad_bytes"),
        "optimizer_bytes": state("optimizer_bytes"),
        "bytes_per_microbatch": int(stages["bytes_per_microbatch"].sum()),
        "capacity_bytes": capacity,
        "near_capacity": near,
        "holds_more_than_schedule": held_more or extra,
        "finding": _finding(worst, stages, held_more, near),
    }
