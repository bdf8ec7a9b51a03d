"""Sweeps: simulate many (schedule, P, M) at equal model cost, and what the differences are worth.

Costs are given for one rank's share of the model (``share_costs``): a schedule that cuts that
share into v stages (interleaved-1f1b, zbv, dualpipev) runs each stage at cost / v, so every
schedule in a sweep trains the same model on the same ranks. ``recovered_gpu_hours`` turns two
makespans into GPU-hours per million training tokens, given the baseline's measured step time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import polars as pl

from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.model import Schedule, ScheduleError
from tracekit.schedule.registry import generate

SWEEP_SCHEMA: dict[str, pl.DataType] = {
    "schedule": pl.String(),
    "pp": pl.Int32(),
    "microbatches": pl.Int32(),
    "stages": pl.Int32(),
    "makespan": pl.Float64(),
    "bubble_rate": pl.Float64(),
    "utilization": pl.Float64(),
    "max_bubble_fraction": pl.Float64(),
    "peak_activations": pl.Float64(),
    "param_copies": pl.Int32(),
}
"""One row per simulated (schedule, pp, microbatches); times in the costs' unit."""

MAX_SWEEP_CELLS = 512
"""Most (schedule, pp, micro-batches) combinations one sweep simulates."""

SWEEP_DEFINITIONS: tuple[str, ...] = (
    "utilization = mean over ranks of busy / makespan",
    "max_bubble_fraction = the worst rank's idle / makespan",
    "speedup_vs_baseline = baseline makespan / makespan, same pp and microbatches",
)


@dataclass(frozen=True)
class ShareCosts:
    """Costs of one micro-batch through one rank's share of the model, the unit a sweep compares at."""

    f: float
    """Forward."""
    b: float
    """Backward for inputs (Zero Bubble's T_B)."""
    w: float
    """Backward for weights."""
    fb: float | None = None
    """Overlapped F&B chunk; None means f + b + w."""
    comm: float = 0.0
    """Point-to-point latency per hop (not divided)."""

    def __post_init__(self) -> None:
        for name in ("f", "b", "w", "comm"):
            if not getattr(self, name) >= 0:
                raise ScheduleError(f"--{name} must be >= 0, got {getattr(self, name)}")
        if self.fb is not None and not self.fb >= 0:
            raise ScheduleError(f"--fb must be >= 0, got {self.fb}")


def share_costs(schedule: Schedule, share: ShareCosts) -> Costs:
    """Per-stage costs for ``schedule``: the share's costs divided by its stages per rank (v)."""
    v = schedule.stages_per_rank
    fb = None if share.fb is None else share.fb / v
    return Costs.uniform(schedule.num_stages, share.f / v, share.b / v, share.w / v, fb=fb, comm=share.comm)


def sweep(
    names: Iterable[str],
    pps: Iterable[int],
    microbatches: Iterable[int],
    share: ShareCosts,
    chunks: int | None = None,
    on_done: Callable[[], None] | None = None,
) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """Simulate every combination; returns the rows and one line per combination that was skipped.

    ``on_done()`` is called after each combination (simulated or skipped), to draw progress.
    """
    names, pps, microbatches = list(names), list(pps), list(microbatches)
    cells = len(names) * len(pps) * len(microbatches)
    if cells > MAX_SWEEP_CELLS:
        raise ScheduleError(
            f"{len(names)} schedules x {len(pps)} pp values x {len(microbatches)} micro-batch counts is "
            f"{cells} simulations, more than the {MAX_SWEEP_CELLS} one sweep runs"
        )
    rows: dict[str, list] = {name: [] for name in SWEEP_SCHEMA}
    skipped: list[str] = []
    for name in names:
        for pp in pps:
            for mb in microbatches:
                try:
                    schedule = generate(name, pp, mb, chunks if name == "interleaved-1f1b" else None)
                except ScheduleError as error:
                    skipped.append(f"skipped {name} pp={pp} microbatches={mb}: {error}")
                    if on_done:
                        on_done()
                    continue
                summary = summarize(simulate(schedule, share_costs(schedule, share)))
                if on_done:
                    on_done()
                ranks = summary.ranks
                values = (
                    name,
                    pp,
                    mb,
                    schedule.num_stages,
                    summary.makespan,
                    summary.bubble_rate,
                    1.0 - float(ranks["bubble_fraction"].mean()),  # type: ignore[arg-type]
                    float(ranks["bubble_fraction"].max()),  # type: ignore[arg-type]
                    float(ranks["peak_activations"].max()),  # type: ignore[arg-type]
                    summary.param_copies,
                )
                for column, value in zip(SWEEP_SCHEMA, values):
                    rows[column].append(value)
    if not rows["schedule"]:
        raise ScheduleError("no combination could be simulated: " + "; ".join(skipped))
    return pl.DataFrame(rows, schema=SWEEP_SCHEMA), tuple(skipped)


@dataclass(frozen=True)
class StepEconomics:
    """What a step costs in GPU time: the baseline's measured step time and the job's size."""

    step_time_s: float
    """Measured wall time of one training step with the baseline schedule, seconds."""
    tokens_per_step: int
    """Training tokens in one step (global batch x sequence length)."""
    gpus: int
    """GPUs the job runs on (all pipelines)."""

    def __post_init__(self) -> None:
        if not (self.step_time_s > 0 and self.tokens_per_step > 0 and self.gpus > 0):
            raise ScheduleError("step time, tokens per step and GPUs must all be > 0")

    def definitions(self) -> tuple[str, ...]:
        """How the GPU-hour columns are computed, for the notes under a table."""
        return (
            f"gpu_hours_per_mtok = {self.gpus} GPUs x step time / 3600 / (tokens per step / 1e6)",
            f"step time = the baseline's {self.step_time_s} s x makespan / baseline makespan",
            "gpu_hours_recovered_per_mtok = baseline's gpu_hours_per_mtok - this row's",
        )

    def gpu_hours_per_million_tokens(self, makespan_ratio: float = 1.0) -> float:
        """GPU-hours per 10^6 tokens when the step takes ``makespan_ratio`` times the baseline's."""
        return self.gpus * self.step_time_s * makespan_ratio / 3600.0 / (self.tokens_per_step / 1e6)


def compare_to_baseline(frame: pl.DataFrame, baseline: str, economics: StepEconomics | None) -> pl.DataFrame:
    """Add each row's speed-up over ``baseline`` at the same (pp, microbatches) and, with economics,
    GPU-hours per million tokens and those recovered against the baseline.

    The step time of a schedule is the baseline's measured step time scaled by the ratio of
    simulated makespans: the pipeline is assumed to be the whole step.
    """
    base = frame.filter(pl.col("schedule") == baseline).select(
        "pp", "microbatches", pl.col("makespan").alias("baseline_makespan")
    )
    if base.is_empty():
        raise ScheduleError(f"baseline {baseline!r} has no simulated rows to compare with")
    joined = frame.join(base, on=["pp", "microbatches"], how="left")
    ratio = pl.col("makespan") / pl.col("baseline_makespan")
    joined = joined.with_columns((1.0 / ratio).alias("speedup_vs_baseline"))
    if economics is not None:
        per_mtok = economics.gpu_hours_per_million_tokens()
        joined = joined.with_columns(
            (ratio * per_mtok).alias("gpu_hours_per_mtok"),
            ((1.0 - ratio) * per_mtok).alias("gpu_hours_recovered_per_mtok"),
        )
    return joined.drop("baseline_makespan")
