"""The timing engine on hand-built graphs: program order, sync groups, DP sync, cycles."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.schedule.timing import replay
from tracekit.whatif.graph import GraphBuilder, GraphCycleError


def _durations(values: list[list[float]]) -> np.ndarray:
    """(nodes, 1 slot, dp replicas) from per-node lists over dp replicas."""
    return np.asarray(values, dtype=float)[:, None, :]


def test_chain_ends_are_cumulative_durations() -> None:
    builder = GraphBuilder()
    nodes = [builder.node(name) for name in "abc"]
    builder.chain(nodes)

    timeline = replay(builder.build().timing, _durations([[1.0], [2.0], [3.0]]))

    assert timeline.end[:, 0, 0].tolist() == [1.0, 3.0, 6.0]
    assert timeline.start[:, 0, 0].tolist() == [0.0, 1.0, 3.0]


def test_sync_group_ends_its_transfer_after_the_last_member_starts() -> None:
    builder = GraphBuilder()
    slow, fast = builder.node("slow"), builder.node("fast")
    send, recv = builder.node("send"), builder.node("recv")
    builder.edge(slow, send)
    builder.edge(fast, recv)
    builder.group([send, recv])

    timeline = replay(builder.build().timing, _durations([[5.0], [1.0], [0.5], [0.25]]))

    assert timeline.start[[send, recv], 0, 0].tolist() == [5.0, 1.0]
    assert timeline.end[[send, recv], 0, 0].tolist() == [5.5, 5.25]


@pytest.mark.parametrize(("across_dp", "expected"), [(False, [2.0, 5.0]), (True, [5.0, 5.0])])
def test_dp_collective_waits_for_every_replica_only_when_synced(
    across_dp: bool, expected: list[float]
) -> None:
    builder = GraphBuilder()
    work, collective = builder.node("work"), builder.node("allreduce")
    builder.edge(work, collective)
    builder.group([collective], across_dp=across_dp)

    timeline = replay(builder.build().timing, _durations([[1.0, 4.0], [1.0, 1.0]]))

    assert timeline.end[collective, 0].tolist() == expected


def test_cycle_through_a_sync_group_is_refused() -> None:
    builder = GraphBuilder()
    a, b, c, d = (builder.node(name) for name in "abcd")
    builder.edge(a, b)
    builder.edge(c, d)
    builder.edge(b, c)  # c (group with a) waits for b, which waits for a
    builder.group([a, d])

    with pytest.raises(GraphCycleError, match="cycle"):
        builder.build()
