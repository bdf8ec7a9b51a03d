"""Realized-actions frames made by the schedule simulator, for tests that need exact ground truth.

Imported by tests as ``whatif.simulated_runs`` (``tests/`` is on the path through its conftest).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracekit.schedule.action import flatten
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.registry import generate

STEP_GAP_NS = 10_000_000_000
"""Steps are laid 10 s apart on every clock."""


def stage_slowdown(name: str, pp: int, slow_rank: int | None, factor: float) -> tuple[float, ...]:
    """Per-stage cost multipliers that make ``slow_rank``'s stages ``factor`` times slower."""
    schedule = generate(name, pp, 8)
    factors = [1.0] * schedule.num_stages
    if slow_rank is not None:
        for action in flatten(schedule.steps[slow_rank]):
            factors[action.stage] = factor
    return tuple(factors)


def simulated_actions(
    name: str,
    pp: int = 4,
    microbatches: int = 8,
    steps: int = 2,
    slow_rank: int | None = None,
    factor: float = 1.0,
    slow_steps: Sequence[int] | None = None,
    comm_ms: float = 0.0,
) -> pl.DataFrame:
    """The realized-actions frame (tracekit.analysis.realized schema, one pipeline) of a simulated run.

    F costs 2 ms, I 2 ms, W 1 ms on every stage, an F&B pair the sum of its halves; ``slow_rank``'s
    stages cost ``factor`` times as much in ``slow_steps`` (all steps when None).
    """
    schedule = generate(name, pp, microbatches)
    slow = stage_slowdown(name, pp, slow_rank, factor)
    parts = []
    for step in range(steps):
        scale = slow if slow_steps is None or step in slow_steps else (1.0,) * schedule.num_stages
        costs = Costs(
            forward=tuple(2.0 * s for s in scale),
            backward_input=tuple(2.0 * s for s in scale),
            backward_weight=tuple(1.0 for _ in scale),
            comm=comm_ms,
        )
        frame = simulate(schedule, costs).to_frame()
        parts.append(
            frame.with_columns(
                pl.lit(0, pl.Int32()).alias("replica"),
                pl.lit(step, pl.Int32()).alias("step"),
                ((pl.col("start") * 1e6).round().cast(pl.Int64()) + step * STEP_GAP_NS).alias("start_ns"),
                ((pl.col("end") * 1e6).round().cast(pl.Int64()) + step * STEP_GAP_NS).alias("end_ns"),
            )
        )
    return (
        pl.concat(parts)
        .select("rank", "replica", "step", "stage", "kind", "microbatch", "start_ns", "end_ns", "overlapped")
        .sort("rank", "start_ns")
    )


def data_parallel_actions(
    name: str,
    replicas: int = 2,
    pp: int = 4,
    slow_replica: int | None = None,
    slow_rank: int | None = None,
    factor: float = 1.0,
    **simulated: object,
) -> pl.DataFrame:
    """``replicas`` simulated pipelines side by side: rank ``d * pp + r`` runs pipeline rank r of replica d.

    Only replica ``slow_replica``'s pipeline rank ``slow_rank`` is slowed by ``factor``.
    """
    parts = [
        simulated_actions(
            name,
            pp=pp,
            slow_rank=slow_rank if replica == slow_replica else None,
            factor=factor,
            **simulated,  # type: ignore[arg-type]
        ).with_columns(
            (pl.col("rank") + replica * pp).cast(pl.Int32()).alias("rank"),
            pl.lit(replica, pl.Int32()).alias("replica"),
        )
        for replica in range(replicas)
    ]
    return pl.concat(parts).sort("rank", "start_ns")
