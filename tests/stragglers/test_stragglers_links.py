"""Slow-link pricing in one batch equals a full rebuild and replay per link; the complement median is polars'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.run_analysis import analyse
from tracekit.stragglers.links import _median_without, exposed_latencies, slow_links
from tracekit.whatif.pipeline import pipeline_case_nodes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _savings_one_by_one(actions: pl.DataFrame) -> dict[tuple[int, int], float | None]:
    """Each link priced by a full replay of its own: the recorded run with the link's consumers cut."""
    latencies, ordered = exposed_latencies(actions)
    case, _, node = pipeline_case_nodes(ordered.drop("row"), "links")
    gap = case.ops["gap_ms"].to_numpy()
    occupied = np.maximum(case.ops["duration_ms"].to_numpy() + gap, 0.0)
    recorded_ms = float(case.replay_step_times(occupied).mean())
    out: dict[tuple[int, int], float | None] = {}
    for rank_a, rank_b in latencies.select("rank_a", "rank_b").unique().sort("rank_a", "rank_b").iter_rows():
        mine = (latencies["rank_a"] == rank_a) & (latencies["rank_b"] == rank_b)
        own, others = latencies.filter(mine), latencies.filter(~mine)
        if not others.height:
            out[(rank_a, rank_b)] = None
            continue
        latency, reference = float(own["latency_ms"].median()), float(others["latency_ms"].median())
        scale = min(1.0, reference / latency) if latency > 0 else 1.0
        cut = np.zeros(occupied.size)
        np.add.at(cut, node[own["row"].to_numpy()], own["latency_ms"].to_numpy() * (1.0 - scale))
        changed = occupied - np.minimum(cut, np.maximum(gap, 0.0))
        out[(rank_a, rank_b)] = recorded_ms - float(case.replay_step_times(changed).mean())
    return out


@pytest.mark.parametrize("name", ["1f1b", "dualpipev", "dualpipev-straggler", "zbv"])
def test_batched_link_prices_equal_one_replay_per_link(name: str) -> None:
    actions = analyse(SAMPLES / name).actions

    links = slow_links(actions, 100.0)

    expected = _savings_one_by_one(actions)
    got = {(row["rank_a"], row["rank_b"]): row["saving_ms"] for row in links.iter_rows(named=True)}
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(0, 50, allow_nan=False),
            st.floats(0, 1e-3, allow_nan=False),
            st.integers(0, 40).map(float),
        ),
        min_size=1,
        max_size=40,
    ),
    st.data(),
)
def test_median_without_some_elements_is_the_complements_median(values: list[float], data) -> None:
    removed = data.draw(st.sets(st.integers(0, len(values) - 1), max_size=len(values)))
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    kept = [value for index, value in enumerate(ordered.tolist()) if index not in removed]

    got = _median_without(ordered, np.array(sorted(removed), dtype=np.int64))

    assert got == (pl.Series(kept, dtype=pl.Float64()).median() if kept else None)
