"""Each run's step times, the measured change between two runs, and the noise band it is judged against.

A run's steps vary: load, the host's other work, a collective that waited. The change between two
runs counts only when it stands beyond that variation. The spread of a run is the scaled median
absolute deviation of its step times (``MAD_TO_SIGMA`` x MAD: a standard deviation for normal
noise, robust to one outlier step); a median of n steps varies by ``MEDIAN_SE`` x spread / sqrt(n)
(its standard error), so the noise band of the change of the medians is

    noise_ms = max(noise_k * 1.2533 * sqrt(spread_base**2 / n_base + spread_new**2 / n_new),
                   noise_floor_share * base median)

The floor stands for what step-to-step variation within one run cannot show: two captures at
different moments of a shared machine differ by more than the steps of either.

``STEPS_SCHEMA``, one row per run and step:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| run | String | ``base`` or ``new`` | never null |
| step | Int64 | training step | never null |
| step_ms | Float64 | wall span of the step as recorded, ms | never null |

Not for: explaining the change (``tracekit.changes.explain``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

STEPS_SCHEMA: dict[str, pl.DataType] = {"run": pl.String(), "step": pl.Int64(), "step_ms": pl.Float64()}

MAD_TO_SIGMA = 1.4826
"""Scale of the median absolute deviation to a standard deviation of normal noise."""

MEDIAN_SE = 1.2533
"""Standard error of a median of n normal samples, in units of sigma / sqrt(n) (sqrt(pi / 2))."""

NOISE_DEFINITION = (
    "noise band: max(noise_k x 1.2533 x sqrt(spread_base^2 / steps_base + spread_new^2 / steps_new), "
    "noise_floor_share x BASE median step): noise_k standard errors of the change of the medians; "
    "spread: 1.4826 x the median absolute deviation of a run's step times"
)
"""The noise band, as every output quotes it."""


@dataclass(frozen=True)
class NoiseConfig:
    """How the noise band of a step-time change is drawn."""

    noise_k: float = 3.0
    """Standard errors of the change of the medians that a change must exceed."""
    noise_floor_share: float = 0.05
    """Smallest band, as a share of BASE's median step: run-to-run variation one run's steps cannot show."""

    def __post_init__(self) -> None:
        if self.noise_k <= 0:
            raise ValueError("noise_k must be > 0")
        if not 0 <= self.noise_floor_share < 1:
            raise ValueError("noise_floor_share must be in [0, 1)")


@dataclass(frozen=True)
class RunSteps:
    """One run's step times: how many, their median, spread, least and most (ms)."""

    steps: int
    median_ms: float
    spread_ms: float
    min_ms: float
    max_ms: float


@dataclass(frozen=True)
class StepChange:
    """The measured change of the median step from BASE to NEW and whether it stands beyond noise."""

    base: RunSteps
    new: RunSteps
    change_ms: float
    """NEW's median step minus BASE's, ms (positive: NEW is slower)."""
    change_pct: float
    """``change_ms`` as a percentage of BASE's median step."""
    noise_ms: float
    """The noise band (``NOISE_DEFINITION``), ms."""
    beyond_noise: bool
    """True when ``|change_ms|`` exceeds ``noise_ms``."""


def run_steps(step_ms: np.ndarray) -> RunSteps:
    """Median, spread (scaled MAD), least and most of one run's step times."""
    assert step_ms.size > 0
    median = float(np.median(step_ms))
    spread = MAD_TO_SIGMA * float(np.median(np.abs(step_ms - median)))
    return RunSteps(int(step_ms.size), median, spread, float(step_ms.min()), float(step_ms.max()))


def step_change(base_ms: np.ndarray, new_ms: np.ndarray, config: NoiseConfig | None = None) -> StepChange:
    """The change of the median step from ``base_ms`` to ``new_ms`` (each run's step times) and its noise band."""
    config = config or NoiseConfig()
    base, new = run_steps(base_ms), run_steps(new_ms)
    change = new.median_ms - base.median_ms
    standard_error = MEDIAN_SE * math.sqrt(base.spread_ms**2 / base.steps + new.spread_ms**2 / new.steps)
    noise = max(config.noise_k * standard_error, config.noise_floor_share * base.median_ms)
    return StepChange(
        base=base,
        new=new,
        change_ms=change,
        change_pct=100.0 * change / base.median_ms if base.median_ms > 0 else math.nan,
        noise_ms=noise,
        beyond_noise=abs(change) > noise,
    )


def steps_frame(base: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """``STEPS_SCHEMA`` from two ``(step, measured_ms)`` frames (``tracekit.whatif.case.MEASURED_SCHEMA``)."""
    return pl.concat(
        [
            frame.sort("step").select(
                pl.lit(name).alias("run"), "step", pl.col("measured_ms").alias("step_ms")
            )
            for name, frame in (("base", base), ("new", new))
        ]
    ).cast(STEPS_SCHEMA)  # type: ignore[arg-type]


def step_spans(actions: pl.DataFrame) -> pl.DataFrame:
    """Per step of realized ``actions``: its wall span, first action start to last action end (``MEASURED_SCHEMA``)."""
    return (
        actions.group_by("step")
        .agg(((pl.col("end_ns").max() - pl.col("start_ns").min()) / 1e6).alias("measured_ms"))
        .sort("step")
        .cast({"step": pl.Int64(), "measured_ms": pl.Float64()})
    )


def regressed(change: StepChange, fail_over_pct: float) -> bool:
    """The gate: NEW's median step slower than BASE's by more than ``fail_over_pct`` percent and beyond noise."""
    return change.beyond_noise and change.change_ms > 0 and change.change_pct > fail_over_pct
