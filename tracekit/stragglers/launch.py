"""Each GPU action's time split into kernels running and the GPU waiting for its CPU to launch them.

On a GPU clock an action lasts from its first kernel's start to its last kernel's end (the work
launched inside its label, ``tracekit.gpu.schedule.project_actions``). Inside that span the GPU is
either busy (the union of the action's kernels, copies and memsets on all the rank's streams) or
idle; an idle gap that ends before the launch call of the kernel after it had returned is the GPU
waiting for the CPU (``tracekit.gpu.timeline.launch_wait``). A rank whose CPU launches slower than
its GPU runs (Python overhead, many tiny kernels, a busy host core) is ``launch-bound``: its extra
time is that wait, while its CPU keeps launching until the action's end
(``tracekit.stragglers.causes``).

``LAUNCH_SCHEMA``, one row per (rank, step, stage, kind) with GPU work:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank, step, stage | Int32 | as in the realized actions | never null |
| kind | String | F, B, I or W | never null |
| actions | Int64 | actions that launched GPU work | never null |
| wall_ms | Float64 | their GPU spans (first kernel start to last kernel end), summed, ms | never null |
| busy_ms | Float64 | the GPU busy inside them (union of their activities), summed, ms | never null |
| launch_wait_ms | Float64 | the GPU idle inside them before the next kernel's launch had returned, ms | never null |
| launching_ms | Float64 | the part of their GPU spans before their last launch returned (CPU still launching), ms | never null |

Not for: projecting the actions (``tracekit.gpu``) or naming causes (``causes``).
"""

from __future__ import annotations

import polars as pl

LAUNCH_KEY = ["rank", "step", "stage", "kind"]

LAUNCH_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "actions": pl.Int64(),
    "wall_ms": pl.Float64(),
    "busy_ms": pl.Float64(),
    "launch_wait_ms": pl.Float64(),
    "launching_ms": pl.Float64(),
}


def launch_figures(projection: pl.DataFrame) -> pl.DataFrame:
    """``LAUNCH_SCHEMA``: per (rank, step, stage, kind), the GPU span, busy time and launch wait of its
    actions (``tracekit.gpu.schedule.ACTION_PROJECTION_SCHEMA`` rows; those that launched nothing are left out)."""
    launched = projection.filter(pl.col("kernels") > 0)
    return (
        launched.group_by(LAUNCH_KEY)
        .agg(
            pl.len().cast(pl.Int64()).alias("actions"),
            ((pl.col("gpu_end_ns") - pl.col("gpu_start_ns")).sum() / 1e6).alias("wall_ms"),
            (pl.col("gpu_busy_ns").sum() / 1e6).alias("busy_ms"),
            (pl.col("launch_wait_ns").sum() / 1e6).alias("launch_wait_ms"),
            (pl.col("launching_ns").sum() / 1e6).alias("launching_ms"),
        )
        .select(list(LAUNCH_SCHEMA))
        .cast(LAUNCH_SCHEMA)  # type: ignore[arg-type]
        .sort(LAUNCH_KEY)
    )


def rank_launch(figures: pl.DataFrame, kinds: set[str] | None = None) -> pl.DataFrame:
    """Per rank, over ``kinds`` (all when None): ``steps`` and each ``LAUNCH_SCHEMA`` time summed."""
    chosen = figures if kinds is None else figures.filter(pl.col("kind").is_in(sorted(kinds)))
    return chosen.group_by("rank").agg(
        pl.col("step").n_unique().alias("steps"),
        *(pl.col(name).sum() for name in ("wall_ms", "busy_ms", "launch_wait_ms", "launching_ms")),
    )
