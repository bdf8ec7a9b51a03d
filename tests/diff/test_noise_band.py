"""The diff's noise band: the distribution-free confidence interval of the shift between two runs' steps."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from tracekit.changes import steps
from tracekit.changes.steps import NoiseConfig, shift_interval, step_change


def _counted_rank(n_base: int, n_new: int, tail: float) -> int:
    """``_interval_rank`` by counting U over every placement of NEW's steps among all steps."""
    counts = []
    for placed in combinations(range(n_base + n_new), n_new):
        taken = set(placed)
        counts.append(sum(sum(1 for below in range(at) if below not in taken) for at in placed))
    counts_u = np.array(counts)
    return max(k for k in range(n_base * n_new + 2) if (counts_u < k).mean() <= tail)


@pytest.mark.parametrize("n_base, n_new", [(1, 1), (2, 9), (4, 4), (5, 5), (3, 6), (6, 7), (8, 8)])
@pytest.mark.parametrize("tail", [0.005, 0.025])
def test_the_exact_rank_is_the_counted_one(n_base: int, n_new: int, tail: float) -> None:
    assert steps._interval_rank(n_base, n_new, tail) == _counted_rank(n_base, n_new, tail)


def test_the_normal_approximation_is_near_the_exact_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    exact = steps._interval_rank(50, 60, 0.005)
    monkeypatch.setattr(steps, "MANN_WHITNEY_EXACT", 0)
    assert abs(steps._interval_rank(50, 60, 0.005) - exact) <= 3


def test_five_steps_a_run_give_the_widest_interval() -> None:
    base, new = np.array([10.0, 11, 12, 13, 20]), np.array([30.0, 31, 35, 36, 40])
    assert shift_interval(base, new, 0.99) == (30.0 - 20.0, 40.0 - 10.0)


def test_two_clean_captures_under_load_stay_within_the_band() -> None:
    # Back-to-back captures of the same job with two CPU hogs beside it: two slow steps of BASE's five.
    base = np.array([286.2, 225.8, 336.0, 214.6, 228.2])
    clean = np.array([273.3, 278.7, 249.7, 179.6, 274.9])
    change = step_change(base, clean, NoiseConfig())
    assert change.change_ms == pytest.approx(45.1) and not change.beyond_noise
    assert change.noise_ms == pytest.approx(((278.7 - 214.6) - (179.6 - 336.0)) / 2)


def test_steps_that_never_overlap_stand_beyond_the_band() -> None:
    # A slow link's steps: bimodal, but every one slower than every step of BASE.
    base = np.array([84.5, 129.4, 210.2, 122.3, 197.3])
    new = np.array([1534.2, 1538.7, 872.4, 678.5, 724.6])
    assert step_change(base, new).beyond_noise


def test_confidence_must_be_a_probability() -> None:
    with pytest.raises(ValueError, match="confidence"):
        NoiseConfig(confidence=1.0)
