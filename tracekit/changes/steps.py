"""Each run's step times, the measured change between two runs, and the noise band it is judged against.

A run's steps vary: load, the host's other work, a collective that waited. The change between two
runs counts only when it stands beyond that variation. Under load a run's step times are far from
normal: a few steps of five can take twice the others, and the next capture's median may land on
either cluster. So the band assumes no distribution: it is half the width of the distribution-free
confidence interval of the shift between the two runs' step times (Hodges-Lehmann; the interval of
the Mann-Whitney test, Lehmann, *Nonparametrics*, 1975, section 2.6):

    differences: every NEW step minus every BASE step (n_base x n_new of them), sorted: d_1 .. d_N
    k: the largest k with P(U < k) <= (1 - confidence) / 2 under no change (U: the Mann-Whitney
       count, exact up to MANN_WHITNEY_EXACT pairs, its normal approximation beyond); at least 1
    noise_ms = max((d_(N + 1 - k) - d_k) / 2, noise_floor_share x BASE median step)

With five steps a run the interval is the widest the steps allow (k = 1: from the least to the most
difference, half the sum of both runs' ranges), at 99.2% confidence. The change of the medians
counts when it exceeds that half-width. The floor stands for what the steps of two captures cannot
show: captures made at different moments of a shared machine can differ by more than the steps of
either. Each run's ``spread_ms`` (1.4826 x the median absolute deviation of its step times) is
reported, not used by the band.

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
from statistics import NormalDist

import numpy as np
import polars as pl

STEPS_SCHEMA: dict[str, pl.DataType] = {"run": pl.String(), "step": pl.Int64(), "step_ms": pl.Float64()}

MAD_TO_SIGMA = 1.4826
"""Scale of the median absolute deviation to a standard deviation of normal noise."""

MANN_WHITNEY_EXACT = 2500
"""Up to this many step pairs (n_base x n_new) the Mann-Whitney count's null distribution is exact."""

NOISE_DEFINITION = (
    "noise band: max(half the width of the distribution-free confidence interval of the shift between "
    "the runs' step times (Hodges-Lehmann: order statistics of every NEW step minus every BASE step, "
    "ranks from the Mann-Whitney test), noise_floor_share x BASE median step)"
)
"""The noise band, as every output quotes it."""


@dataclass(frozen=True)
class NoiseConfig:
    """How the noise band of a step-time change is drawn."""

    confidence: float = 0.99
    """Confidence of the shift's interval whose half-width is the band (fewer steps: the widest they allow)."""
    noise_floor_share: float = 0.05
    """Smallest band, as a share of BASE's median step: run-to-run variation two captures' steps cannot show."""

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise ValueError("confidence must be in (0, 1)")
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


def _interval_rank(n_base: int, n_new: int, tail: float) -> int:
    """The largest k with P(U < k) <= ``tail`` under no change (0 if none), U the count of (BASE, NEW)
    pairs with NEW above: exact up to ``MANN_WHITNEY_EXACT`` pairs, the normal approximation beyond."""
    pairs = n_base * n_new
    if pairs > MANN_WHITNEY_EXACT:
        sd = math.sqrt(pairs * (n_base + n_new + 1) / 12)
        return max(math.floor(pairs / 2 + 0.5 + sd * NormalDist().inv_cdf(tail)), 0)
    # dist[j]: U's distribution for i BASE and j NEW steps. The largest of all i + j steps is NEW's
    # with probability j / (i + j), and then lies above the i BASE steps (U grows by i).
    dist = [np.ones(1) for _ in range(n_new + 1)]  # no BASE step: U is 0
    for i in range(1, n_base + 1):
        grown = [np.ones(1)]
        for j in range(1, n_new + 1):
            both = np.zeros(i * j + 1)
            both[i:] += j / (i + j) * grown[j - 1]
            both[: dist[j].size] += i / (i + j) * dist[j]
            grown.append(both)
        dist = grown
    return int(np.count_nonzero(np.cumsum(dist[n_new]) <= tail))


def shift_interval(base_ms: np.ndarray, new_ms: np.ndarray, confidence: float) -> tuple[float, float]:
    """The distribution-free confidence interval of NEW's shift against BASE (ms), or the widest the steps allow."""
    differences = np.sort(np.subtract.outer(new_ms, base_ms), axis=None)
    k = max(_interval_rank(base_ms.size, new_ms.size, (1 - confidence) / 2), 1)
    return float(differences[k - 1]), float(differences[differences.size - k])


def step_change(base_ms: np.ndarray, new_ms: np.ndarray, config: NoiseConfig | None = None) -> StepChange:
    """The change of the median step from ``base_ms`` to ``new_ms`` (each run's step times) and its noise band."""
    config = config or NoiseConfig()
    base, new = run_steps(base_ms), run_steps(new_ms)
    change = new.median_ms - base.median_ms
    low, high = shift_interval(base_ms, new_ms, config.confidence)
    noise = max((high - low) / 2, config.noise_floor_share * base.median_ms)
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
