"""Batched counterfactual replays equal one full replay per change, to the bit, whatever the packing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.whatif.case import MEASURED_SCHEMA, OPS_SCHEMA, ReplayCase
from tracekit.whatif.counterfactuals import Change, Counterfactuals, components
from tracekit.whatif.graph import GraphBuilder
from tracekit.whatif.megatron import megatron_case
from tracekit.whatif.optable import read_meta, read_optable


def _case(
    lanes: list[int],
    edges: list[tuple[int, int]],
    groups: list[tuple[list[int], bool]],
    slots: int,
    dp: int,
    seed: int,
) -> ReplayCase:
    """A case of ``lanes`` (nodes per rank, each lane in program order), extra forward edges and sync groups."""
    builder = GraphBuilder()
    offsets = np.cumsum([0, *lanes])
    nodes = [builder.node(f"n{i}") for i in range(int(offsets[-1]))]
    rank_of = np.repeat(np.arange(len(lanes)), lanes)
    for lane in range(len(lanes)):
        builder.chain(nodes[offsets[lane] : offsets[lane + 1]])
    for before, after in edges:
        builder.edge(before, after)
    for members, across in groups:
        builder.group(members, across_dp=across)
    graph = builder.build()
    cells = [(node, slot, d) for node in range(graph.size) for slot in range(slots) for d in range(dp)]
    rng = np.random.default_rng(seed)
    ops = pl.DataFrame(
        {
            "node": [c[0] for c in cells],
            "slot": [c[1] for c in cells],
            "dp": [c[2] for c in cells],
            "step": [c[1] for c in cells],
            "dp_rank": [c[2] for c in cells],
            "stage": [int(rank_of[c[0]]) for c in cells],
            "rank": [int(rank_of[c[0]]) * dp + c[2] for c in cells],
            "optype": ["F"] * len(cells),
            "attribution_type": ["F"] * len(cells),
            "ideal_stat": ["mean"] * len(cells),
            "compute": [True] * len(cells),
            "work": ["w"] * len(cells),
            "duration_ms": rng.uniform(0.5, 3.0, len(cells)),
            "gap_ms": [0.0] * len(cells),
        },
        schema=OPS_SCHEMA,
    )
    measured = pl.DataFrame(
        {"step": list(range(slots)), "measured_ms": [1.0] * slots}, schema=MEASURED_SCHEMA
    )
    return ReplayCase(graph=graph, ops=ops, measured=measured, source="op-table")


@st.composite
def cases(draw: st.DrawFn) -> ReplayCase:
    lanes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    total = sum(lanes)
    offsets = np.cumsum([0, *lanes])
    lane_of = np.repeat(np.arange(len(lanes)), lanes)
    # Edges from a lower lane to a higher one keep the graph acyclic; some lanes stay apart (components).
    pairs = [(a, b) for a in range(total) for b in range(total) if lane_of[a] < lane_of[b]]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=8, unique=True)) if pairs else []
    groups = []
    if len(lanes) >= 2 and draw(st.booleans()):
        # One sync group: the last node of the last lane and the last of another, edge-free between them.
        other = draw(st.integers(0, len(lanes) - 2))
        members = [int(offsets[other + 1] - 1), int(offsets[-1] - 1)]
        # Lanes' last nodes: no path joins them once their out-edges are dropped (a group joins them).
        edges = [(a, b) for a, b in edges if a not in members]
        groups.append((members, draw(st.booleans())))
    slots, dp = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    return _case(lanes, edges, groups, slots, dp, draw(st.integers(0, 2**16)))


@st.composite
def cases_and_changes(draw: st.DrawFn) -> tuple[ReplayCase, list[Change]]:
    case = draw(cases())
    base = case.ops["duration_ms"].to_numpy()
    changes = []
    for _ in range(draw(st.integers(1, 12))):
        rows = np.asarray(
            sorted(draw(st.sets(st.integers(0, case.ops.height - 1), max_size=5))), dtype=np.int64
        )
        factor = draw(st.sampled_from([0.25, 0.5, 1.0, 2.0]))
        changes.append(Change(rows, base[rows] * factor))
    return case, changes


def _full_replays(case: ReplayCase, base: np.ndarray, changes: list[Change]) -> np.ndarray:
    out = []
    for change in changes:
        durations = base.copy()
        durations[change.rows] = change.values
        out.append(case.replay_step_times(durations))
    return np.array(out)


@settings(max_examples=60, deadline=None)
@given(cases_and_changes(), st.sampled_from([1, 7, 1 << 21]))
def test_batched_step_times_equal_full_replays_bit_for_bit(drawn, budget: int) -> None:
    case, changes = drawn
    base = case.ops["duration_ms"].to_numpy()

    replays = Counterfactuals(case, base, cell_budget=budget)

    np.testing.assert_array_equal(replays.base_steps, case.replay_step_times(base))
    np.testing.assert_array_equal(replays.step_times(changes), _full_replays(case, base, changes))


def test_separate_lanes_are_separate_components() -> None:
    case = _case([2, 3, 2], edges=[(0, 3)], groups=[], slots=1, dp=1, seed=0)

    roots = components(case.graph.timing)

    assert roots.tolist() == [0, 0, 0, 0, 0, 5, 5]


def test_changes_on_disjoint_components_share_one_column() -> None:
    lanes = [3] * 40
    case = _case(lanes, edges=[], groups=[], slots=1, dp=1, seed=1)
    base = case.ops["duration_ms"].to_numpy()
    changes = [Change(np.array([3 * lane]), np.array([9.0])) for lane in range(40)]

    # A budget of one column's cells: were each change its own column, there would be 40 replays.
    replays = Counterfactuals(case, base, cell_budget=case.ops.height)
    steps = replays.step_times(changes)

    np.testing.assert_array_equal(steps, _full_replays(case, base, changes))
    assert {int(replays.reached(change)[0]) for change in changes} == set(range(40))


@pytest.mark.parametrize("name", ["ST", "SE"])
def test_op_table_counterfactuals_equal_full_replays(shared: Path, name: str) -> None:
    root = shared / "traces" / f"whatif-optable-{name}"
    case = megatron_case(
        read_optable(root / f"trace-{name}.parquet"), read_meta(root / f"meta-{name}.yaml"), str(root)
    )
    base = case.ops["duration_ms"].to_numpy()
    ranks = case.ops["rank"].to_numpy()
    changes = [
        Change(np.flatnonzero(ranks == rank), base[ranks == rank] * 0.5) for rank in np.unique(ranks)[:6]
    ]

    steps = Counterfactuals(case, base).step_times(changes)

    np.testing.assert_array_equal(steps, _full_replays(case, base, changes))
