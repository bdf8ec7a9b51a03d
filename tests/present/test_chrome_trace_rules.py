"""The format rules the export is checked against catch what they claim to, on generated traces."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.present.chrome_trace_rules import violations

_HEAD = [
    {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": "rank 0"}},
    {"ph": "M", "pid": 0, "tid": 0, "name": "thread_name", "args": {"name": "actions"}},
]


@st.composite
def nested_slices(
    draw: st.DrawFn, start: int = 0, end: int = 10_000, depth: int = 0
) -> list[tuple[int, int]]:
    """Slices inside [start, end): siblings side by side, each maybe holding children."""
    cuts = sorted(draw(st.sets(st.integers(start, end), min_size=0, max_size=6)))
    slices = []
    for low, high in zip(cuts[::2], cuts[1::2]):
        if high - low < 10:  # wider than the rules' 1.5 ns rounding tolerance
            continue
        slices.append((low, high))
        if depth < 2:
            slices += draw(nested_slices(low, high, depth + 1))
    return slices


def _events(slices: list[tuple[int, int]]) -> list[dict[str, Any]]:
    return _HEAD + [
        {"ph": "X", "pid": 0, "tid": 0, "name": f"s{i}", "ts": low / 1000, "dur": (high - low) / 1000}
        for i, (low, high) in enumerate(slices)
    ]


@given(nested_slices())
def test_slices_that_nest_keep_the_rules(slices: list[tuple[int, int]]) -> None:
    assert violations(_events(slices)) == []


@given(nested_slices().filter(lambda s: len(s) >= 1), st.data())
def test_a_slice_crossing_another_s_end_is_caught(slices: list[tuple[int, int]], data: st.DataObject) -> None:
    low, high = data.draw(st.sampled_from(slices))
    crossing = ((low + high) // 2, high + 5_000)  # starts inside, ends past it

    found = violations(_events([*slices, crossing]))

    assert any("without nesting" in problem for problem in found)


@given(nested_slices().filter(lambda s: len(s) >= 2), st.data())
def test_flows_bind_only_inside_slices(slices: list[tuple[int, int]], data: st.DataObject) -> None:
    (a_low, _), (b_low, _) = sorted(data.draw(st.permutations(slices))[:2])
    start = {"ph": "s", "id": 1, "pid": 0, "tid": 0, "name": "dependency", "ts": a_low / 1000}
    end = {"ph": "f", "bp": "e", "id": 1, "pid": 0, "tid": 0, "name": "dependency", "ts": b_low / 1000}

    assert violations([*_events(slices), start, end]) == []
    assert any("lies in no slice" in p for p in violations([*_events(slices), start, {**end, "ts": 20.0}]))
    assert any("not one of each" in p for p in violations([*_events(slices), start]))
