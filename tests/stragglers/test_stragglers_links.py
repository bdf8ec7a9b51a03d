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
from tracekit.whatif.pipeline import pipeline_case

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _replayed_ms(ordered: pl.DataFrame, extra_ms: np.ndarray) -> float:
    """The replay of the run rebuilt from scratch with each start moved ``extra_ms`` earlier."""
    folded = ordered.with_columns(pl.col("start_ns") - pl.Series(np.round(extra_ms * 1e6)).cast(pl.Int64()))
    case, _ = pipeline_case(folded.drop("row"), "links")
    return float(case.replay_step_times(case.ops["duration_ms"].to_numpy()).mean())


def _savings_one_by_one(actions: pl.DataFrame) -> dict[tuple[int, int], float | None]:
    latencies, ordered = exposed_latencies(actions)
    extra = np.zeros(ordered.height)
    extra[latencies["row"].to_numpy()] = latencies["latency_ms"].to_numpy()
    folded_ms = _replayed_ms(ordered, extra)
    out: dict[tuple[int, int], float | None] = {}
    for rank_a, rank_b in latencies.select("rank_a", "rank_b").unique().sort("rank_a", "rank_b").iter_rows():
        mine = (latencies["rank_a"] == rank_a) & (latencies["rank_b"] == rank_b)
        own, others = latencies.filter(mine), latencies.filter(~mine)
        if not others.height:
            out[(rank_a, rank_b)] = None
            continue
        latency, reference = float(own["latency_ms"].median()), float(others["latency_ms"].median())
        restored = extra.copy()
        restored[own["row"].to_numpy()] *= min(1.0, reference / latency) if latency > 0 else 1.0
        out[(rank_a, rank_b)] = folded_ms - _replayed_ms(ordered, restored)
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
