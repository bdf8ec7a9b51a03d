"""Tables the dashboard tests draw: simulated realized runs (with data-parallel replicas) and hostile text."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
import pytest

from tracekit.analysis.dependencies import ACTION_COLUMNS
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.registry import generate

HOSTILE = '</script><script>window.__pwned=1</script><!-- <img src=x onerror="window.__pwned=2"> \u2028'
"""A kernel name / label an attacker would choose: closes the script element, injects markup."""

STEP_GAP_NS = 1_000_000_000


def replicated_actions(
    name: str,
    pp: int,
    microbatches: int,
    replicas: int = 1,
    steps: int = 1,
    slow_rank: int | None = None,
    factor: float = 1.0,
) -> pl.DataFrame:
    """A realized-actions frame (``REALIZED_SCHEMA``) of ``replicas`` simulated pipelines side by side.

    Rank ``replica * pp + r`` runs pipeline rank r of its replica. F costs 2 ms, I 2 ms, W 1 ms on
    every stage; the stages of ``slow_rank`` cost ``factor`` times as much (its replica only).
    """
    schedule = generate(name, pp, microbatches)
    stages_of = [
        {action.stage for step in steps for action in getattr(step, "halves", (step,))}
        for steps in schedule.steps
    ]
    parts = []
    for replica in range(replicas):
        scale = [1.0] * schedule.num_stages
        if slow_rank is not None and slow_rank // pp == replica:
            for stage in stages_of[slow_rank % pp]:
                scale[stage] = factor
        costs = Costs(
            forward=tuple(2.0 * s for s in scale),
            backward_input=tuple(2.0 * s for s in scale),
            backward_weight=tuple(1.0 * s for s in scale),
        )
        frame = simulate(schedule, costs).to_frame()
        for step in range(steps):
            parts.append(
                frame.with_columns(
                    (pl.col("rank") + replica * pp).cast(pl.Int32()).alias("rank"),
                    pl.lit(replica, pl.Int32()).alias("replica"),
                    pl.lit(step, pl.Int32()).alias("step"),
                    ((pl.col("start") * 1e6).round().cast(pl.Int64()) + step * STEP_GAP_NS).alias("start_ns"),
                    ((pl.col("end") * 1e6).round().cast(pl.Int64()) + step * STEP_GAP_NS).alias("end_ns"),
                    pl.lit("simulated").alias("source"),
                )
            )
    return (
        pl.concat(parts)
        .select(*ACTION_COLUMNS, "source")
        .sort("rank", "start_ns")
    )


@pytest.fixture
def simulated_run() -> Callable[..., pl.DataFrame]:
    """Factory: ``simulated_run(name, pp, microbatches, replicas=1, steps=1, slow_rank=None, factor=1.0)``."""
    return replicated_actions


@pytest.fixture
def hostile() -> str:
    """Untrusted text that tries to break out of the page."""
    return HOSTILE


def _replicated_capture(name: str, replicas: int):  # type: ignore[no-untyped-def]
    """The analysis of ``replicas`` copies of sample capture ``name``: rank ``replica * P + r`` runs its rank r."""
    import dataclasses
    from pathlib import Path

    from tracekit.run_analysis import RunAnalysis, analyse

    source = analyse(Path(__file__).resolve().parents[2] / "sample_traces" / name)
    actions = source.actions
    pipeline = actions["rank"].n_unique()
    copies = pl.concat(
        actions.with_columns(
            (pl.col("rank") + replica * pipeline).cast(pl.Int32()),
            pl.lit(replica, pl.Int32()).alias("replica"),
        )
        for replica in range(replicas)
    ).select(actions.columns)
    assert source.manifest is not None
    manifest = dataclasses.replace(
        source.manifest,
        world_size=pipeline * replicas,
        ranks=(),
        pipeline_groups=tuple(tuple(range(r * pipeline, (r + 1) * pipeline)) for r in range(replicas)),
    )
    return RunAnalysis.of_actions(copies, manifest, source=f"{name} x {replicas} replicas")


@pytest.fixture(scope="session")
def replicated_capture() -> Callable[..., object]:
    """Factory: ``replicated_capture(name, replicas)``, a large run made from a real bundled capture."""
    return _replicated_capture
