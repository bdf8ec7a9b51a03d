"""``tracekit.whatif.speed``: a group put at another speed keeps its noise and loses its systematic change."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tracekit.whatif.speed import at_speed

_DURATIONS = st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=50)
_FACTORS = st.floats(0.01, 10.0, allow_nan=False)


def test_an_outlier_keeps_its_excess_and_a_typical_op_scales() -> None:
    # A 0.5 ms op slowed to 1 ms by a planted sleep (median 1 ms, factor 0.5), one op descheduled for 6 ms.
    durations = np.array([0.9, 1.0, 1.1, 7.0])
    out = at_speed(durations, np.full(4, 0.5), np.full(4, 1.0))
    np.testing.assert_allclose(out, [0.45, 0.5, 0.6, 6.5])


@given(_DURATIONS, _FACTORS)
def test_every_op_moves_by_at_most_the_median_change_and_never_below_zero(durations, factor) -> None:
    d = np.array(durations)
    median = float(np.median(d))
    out = at_speed(d, np.full(d.size, factor), np.full(d.size, median))
    assert (out >= 0).all()
    moved = np.abs(out - d)
    assert (moved <= abs(median * (factor - 1.0)) + 1e-9 * (1 + d)).all()
    if d.size % 2:  # the median op itself lands on the target median
        assert np.isclose(np.median(out), median * factor, rtol=1e-9, atol=1e-12)


@given(_DURATIONS)
def test_factor_one_leaves_every_op_as_it_was(durations) -> None:
    d = np.array(durations)
    out = at_speed(d, np.ones(d.size), np.full(d.size, float(np.median(d))))
    np.testing.assert_array_equal(out, d)


@given(_DURATIONS, _FACTORS)
def test_order_is_kept(durations, factor) -> None:
    d = np.sort(np.array(durations))
    out = at_speed(d, np.full(d.size, factor), np.full(d.size, float(np.median(d))))
    assert (np.diff(out) >= -1e-9 * (1 + out[1:])).all()
