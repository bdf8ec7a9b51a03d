"""Busy time, bubbles and windows from realized-schedule frames."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis.realized import REALIZED_SCHEMA
from tracekit.analysis.utilization import rank_utilization, replica_utilization, step_utilization


def _actions(rows: list[tuple[int, int, str, int, int]], replica_size: int = 1_000) -> pl.DataFrame:
    """Rows of (rank, step, kind, start_ns, end_ns); ranks ``d * replica_size ..`` form replica d."""
    return pl.DataFrame(
        [
            {
                "rank": r,
                "replica": r // replica_size,
                "step": s,
                "stage": r,
                "kind": k,
                "microbatch": i,
                "start_ns": a,
                "end_ns": b,
                "overlapped": False,
                "source": "test",
            }
            for i, (r, s, k, a, b) in enumerate(rows)
        ],
        schema=REALIZED_SCHEMA,
    )


def test_window_spans_all_ranks_and_covers_fill_and_drain() -> None:
    actions = _actions([(0, 0, "F", 0, 10), (0, 0, "B", 30, 50), (1, 0, "F", 10, 20), (1, 0, "B", 20, 30)])

    per_step = step_utilization(actions)

    assert per_step["window_ns"].to_list() == [50, 50]
    assert per_step["busy_ns"].to_list() == [30, 20]
    assert per_step["bubble_fraction"].to_list() == [20 / 50, 30 / 50]
    assert per_step.select("F", "B").rows() == [(1, 1), (1, 1)]


def test_overlapping_spans_count_once() -> None:
    actions = _actions([(0, 0, "F", 0, 10), (0, 0, "B", 5, 15), (0, 0, "W", 15, 20)])

    assert step_utilization(actions)["busy_ns"].to_list() == [20]


def test_rank_figures_sum_steps() -> None:
    actions = _actions([(0, 0, "F", 0, 10), (0, 1, "F", 100, 110), (1, 0, "F", 0, 20), (1, 1, "F", 100, 140)])

    per_rank = rank_utilization(step_utilization(actions))

    assert per_rank.row(0, named=True)["window_ns"] == 20 + 40
    assert per_rank.row(0, named=True)["busy_ns"] == 20
    assert per_rank.row(0, named=True)["bubble_fraction"] == 40 / 60


def test_each_replica_has_its_own_span_inside_the_step_window_of_all_ranks() -> None:
    # Replica 0 (ranks 0, 1) is done at 30 ns; replica 1 (ranks 2, 3) runs to 50 ns, in both steps.
    rows = [(0, 0, "F", 0, 10), (1, 0, "F", 10, 30), (2, 0, "F", 0, 20), (3, 0, "F", 20, 50)]
    actions = _actions(rows + [(r, 1, k, a + 100, b + 100) for r, _, k, a, b in rows], replica_size=2)
    per_step = step_utilization(actions)

    per_replica = replica_utilization(actions, per_step)

    assert per_step.filter(pl.col("step") == 0)["window_ns"].to_list() == [50] * 4
    assert per_replica.rows() == [
        (0, 2, 2, 2 * 30, 4 * 50, 2 * 30, 4 * 50 - 60, (200 - 60) / 200),
        (1, 2, 2, 2 * 50, 4 * 50, 2 * 50, 4 * 50 - 100, (200 - 100) / 200),
    ]
    assert rank_utilization(per_step)["replica"].to_list() == [0, 0, 1, 1]


spans = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(0, 1000), st.integers(1, 200)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(spans)
def test_busy_never_exceeds_window_and_bubble_is_non_negative(rows) -> None:
    actions = _actions([(rank, step, "F", start, start + length) for rank, step, start, length in rows])

    per_step = step_utilization(actions)

    assert (per_step["busy_ns"] <= per_step["window_ns"]).all()
    assert (per_step["bubble_ns"] >= 0).all()
    longest = max(length for *_, length in rows)
    assert per_step["busy_ns"].max() >= min(longest, per_step["window_ns"].max())
