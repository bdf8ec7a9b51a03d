"""The timing engine's two kernels compute the same recurrence: lane walk and numpy levels (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.schedule.timing import DependencyCycle, TimingGraph, _by_level, _in_order, replay, timing_graph


@st.composite
def _graphs(draw: st.DrawFn) -> tuple[TimingGraph, np.ndarray]:
    """A random DAG: lanes over nodes in index order, extra edges from lower to higher nodes, latencies."""
    num_nodes = draw(st.integers(1, 40))
    cuts = sorted(draw(st.sets(st.integers(1, num_nodes - 1), max_size=8))) if num_nodes > 1 else []
    pairs = draw(st.lists(st.tuples(st.integers(0, num_nodes - 1), st.integers(0, num_nodes - 1)), max_size=60))
    edges = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})
    sources = np.array([a for a, _ in edges], dtype=np.int64)
    targets = np.array([b for _, b in edges], dtype=np.int64)
    latency = draw(st.none() | st.just(np.array(draw(st.lists(st.floats(0, 3), min_size=len(edges), max_size=len(edges))))))
    durations = np.array(draw(st.lists(st.floats(0, 5), min_size=num_nodes, max_size=num_nodes)))
    lanes = np.array([0, *cuts, num_nodes])
    return timing_graph(num_nodes, sources, targets, latency, lanes=lanes), durations


def _oracle(graph: TimingGraph, durations: np.ndarray) -> np.ndarray:
    """Ends in index order (every edge and lane step goes from a lower to a higher node)."""
    sources, targets, latency = graph.all_edges()
    end = np.zeros(graph.num_nodes)
    for node in range(graph.num_nodes):
        into = targets == node
        arrivals = end[sources[into]] + (0.0 if latency is None else latency[into])
        end[node] = max(arrivals, default=0.0) + durations[node]
    return end


@settings(max_examples=200, deadline=None)
@given(_graphs())
def test_both_kernels_give_the_oracles_times(case: tuple[TimingGraph, np.ndarray]) -> None:
    graph, durations = case

    walked, levelled = _in_order(graph, durations), _by_level(graph, durations)

    expected = _oracle(graph, durations)
    np.testing.assert_allclose(walked.end, expected, atol=1e-12)
    np.testing.assert_allclose(levelled.end, expected, atol=1e-12)
    np.testing.assert_allclose(walked.start, walked.end - durations, atol=1e-12)
    np.testing.assert_allclose(levelled.start, walked.start, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(_graphs(), st.integers(1, 4), st.integers(1, 3))
def test_many_replicas_at_once_equal_one_replay_each(case: tuple[TimingGraph, np.ndarray], slots: int, dp: int) -> None:
    graph, durations = case
    rng = np.random.default_rng(len(durations))
    batched = durations[:, None, None] * rng.uniform(0.5, 2.0, size=(1, slots, dp))

    together = replay(graph, batched)

    for slot in range(slots):
        for replica in range(dp):
            alone = _in_order(graph, batched[:, slot, replica])
            np.testing.assert_allclose(together.end[:, slot, replica], alone.end, atol=1e-12)


@pytest.mark.parametrize("kernel", [_in_order, _by_level], ids=["lanes", "levels"])
def test_a_cycle_names_the_nodes_that_can_never_start(kernel) -> None:
    # 0 -> 1 -> 2 -> 1 (a cycle), 3 alone; node 4 waits for 2.
    graph = timing_graph(5, np.array([0, 1, 2, 2]), np.array([1, 2, 1, 4]))

    with pytest.raises(DependencyCycle) as caught:
        kernel(graph, np.ones(5))

    assert caught.value.ran.tolist() == [True, False, False, True, False]
