"""Span unions, intersections and differences (tracekit.analysis.intervals) against a brute-force count."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analysis import intervals
from tracekit.analysis.intervals import (
    covered_by,
    covered_ns,
    intersect_spans,
    merge_spans,
    overlap_ns,
    subtract_spans,
)


@pytest.fixture(autouse=True, params=["compiled pass", "polars queries"])
def union_road(request, monkeypatch) -> str:
    """Every test on each road of a union: the polars one is what runs where ``_spans`` is not built."""
    if request.param == "polars queries":
        monkeypatch.setattr(intervals, "_spans", None)
    return request.param


spans = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 60), st.integers(0, 15)).map(
        lambda t: (t[0], t[1], t[1] + t[2])
    ),
    max_size=12,
)


def _frame(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"group": pl.Int64(), "start_ns": pl.Int64(), "end_ns": pl.Int64()}, orient="row"
    )


def _points(rows: list[tuple[int, int, int]], group: int) -> set[int]:
    return {t for g, start, end in rows if g == group for t in range(start, end)}


def _length(frame: pl.DataFrame, group: int) -> int:
    part = frame.filter(pl.col("group") == group)
    return int((part["end_ns"] - part["start_ns"]).sum())


@settings(max_examples=150, deadline=None)
@given(first=spans, second=spans)
def test_intersection_and_difference_match_unit_counts(first, second) -> None:
    a, b = _frame(first), _frame(second)

    both = intersect_spans(a, b, ["group"])
    only = subtract_spans(a, b, ["group"])
    overlap = dict(overlap_ns(a, b, ["group"]).iter_rows())

    for group in (0, 1):
        expected_both = len(_points(first, group) & _points(second, group))
        assert _length(both, group) == overlap.get(group, 0) == expected_both
        assert _length(only, group) == len(_points(first, group) - _points(second, group))
    for frame in (both, only):  # disjoint and sorted within a group
        ordered = frame.sort("group", "start_ns")
        assert frame.equals(ordered)
        gaps = ordered.with_columns(pl.col("end_ns").shift(1).over("group").alias("previous_end"))
        assert (gaps["start_ns"] > gaps["previous_end"]).fill_null(True).all()
        assert (frame["end_ns"] > frame["start_ns"]).all()


classed = st.lists(
    st.tuples(st.integers(0, 1), st.sampled_from("abc"), st.integers(0, 60), st.integers(0, 15)).map(
        lambda t: (t[0], t[1], t[2], t[2] + t[3])
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(classes=classed, union=spans, base=st.sampled_from([0, 1_700_000_000_000_000_000]))
def test_time_covered_by_a_shared_union_matches_unit_counts(classes, union, base) -> None:
    """Each (group, class) against its group's one union, as a count of unit instants: a class's
    spans overlapping one another, a group with no union, times near the epoch's nanoseconds."""
    spans_of = pl.DataFrame(
        classes,
        schema={"group": pl.Int64(), "cls": pl.String(), "start_ns": pl.Int64(), "end_ns": pl.Int64()},
        orient="row",
    ).with_columns(pl.col("start_ns", "end_ns") + base)
    merged_union = merge_spans(_frame(union).with_columns(pl.col("start_ns", "end_ns") + base), ["group"])

    found = covered_by(merge_spans(spans_of, ["group", "cls"]), merged_union, ["group", "cls"], ["group"])

    expected = {}
    for group, cls in {(g, c) for g, c, _, _ in classes}:
        points = {t for g, c, start, end in classes if (g, c) == (group, cls) for t in range(start, end)}
        expected[(group, cls)] = (len(points), len(points & _points(union, group)))
    assert {(g, c): (covered, overlap) for g, c, covered, overlap in found.iter_rows()} == expected
    assert found.schema["overlap_ns"] == pl.Int64() and found.schema["covered_ns"] == pl.Int64()


def test_time_covered_by_without_groups() -> None:
    spans = _frame([(0, 0, 10), (0, 20, 30)]).drop("group")
    union = _frame([(0, 5, 25)]).drop("group")

    assert covered_by(spans, union, [], []).rows() == [(20, 10)]


@settings(max_examples=150, deadline=None)
@given(rows=spans, base=st.sampled_from([0, 1_700_000_000_000_000_000]))
def test_merged_spans_cover_the_same_points_disjoint_and_sorted(rows, base) -> None:
    frame = _frame(rows).with_columns(pl.col("start_ns", "end_ns") + base)

    merged = merge_spans(frame, ["group"])

    for group in (0, 1):
        covered = {t - base for g, start, end in merged.iter_rows() if g == group for t in range(start, end)}
        assert covered == _points(rows, group)
    assert merged.equals(merged.sort("group", "start_ns"))
    gaps = merged.with_columns(pl.col("end_ns").shift(1).over("group").alias("previous_end"))
    assert (gaps["start_ns"] > gaps["previous_end"]).fill_null(True).all()  # touching spans are merged


@pytest.mark.parametrize("by", [[], ["group"], ["group", "stream"]])
def test_the_offset_and_the_windowed_merge_agree(by: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [(g, s, start, start + length) for g in (0, 1, None) for s in ("a", "b") for start, length in
            ((0, 5), (3, 4), (7, 0), (7, 1), (20, 2), (22, 1), (30, 0))]  # fmt: skip
    frame = pl.DataFrame(rows, schema=["group", "stream", "start_ns", "end_ns"], orient="row")

    merged = merge_spans(frame, by)
    monkeypatch.setattr(intervals, "_OFFSET_LIMIT", 0)  # every merge takes the windowed road
    windowed = merge_spans(frame, by)

    assert merged.equals(windowed)
    assert merged.equals(merged.sort([*by, "start_ns"]))  # by group, nulls first, then by start
    # [0, 8], [20, 23] and [30, 30] in each group
    assert merged.height == 3 * (frame.select(by).n_unique() if by else 1)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from([0, 1, None]),
            st.sampled_from(["x", "y", None]),
            st.integers(0, 40),
            st.integers(0, 9),
        ),
        max_size=14,
    )
)
def test_spans_of_several_keys_merge_per_key_in_key_order(rows) -> None:
    """Several ``by`` columns, nulls among them: each key's own union, the keys in sort order."""
    frame = pl.DataFrame(
        [(g, s, start, start + length) for g, s, start, length in rows],
        schema={"group": pl.Int64(), "stream": pl.String(), "start_ns": pl.Int64(), "end_ns": pl.Int64()},
        orient="row",
    )

    merged = merge_spans(frame, ["group", "stream"])

    assert merged.equals(merged.sort("group", "stream", "start_ns"))
    for key in {(g, s) for g, s, _, _ in rows}:
        own = [(start, start + length) for g, s, start, length in rows if (g, s) == key]
        found = [(start, end) for g, s, start, end in merged.iter_rows() if (g, s) == key]
        points = {t for start, end in own for t in range(start, end)}
        assert {t for start, end in found for t in range(start, end)} == points
        assert all(end < next_start for (_, end), (next_start, _) in zip(found, found[1:]))


@settings(max_examples=100, deadline=None)
@given(rows=spans, grouped=st.booleans())
def test_covered_time_is_the_count_of_covered_instants(rows, grouped) -> None:
    frame = _frame(rows) if grouped else _frame(rows).drop("group")

    covered = covered_ns(frame, ["group"] if grouped else [])

    if grouped:
        expected = {group: len(_points(rows, group)) for group in {g for g, _, _ in rows}}
        assert dict(covered.iter_rows()) == expected
        assert covered["group"].to_list() == sorted(expected)
    else:
        points = {t for _, start, end in rows for t in range(start, end)}
        assert covered.rows() == [(len(points),)]  # one row, 0 when there are no spans
    assert covered.schema["covered_ns"] == pl.Int64()


def test_the_compiled_pass_reads_every_chunk_of_a_column() -> None:
    """Polars hands a column over chunk by chunk: spans from two frames stacked merge as one."""
    first = _frame([(0, 0, 5), (0, 3, 9)])
    second = _frame([(0, 9, 12), (1, 0, 2)])
    stacked = pl.concat([first, second], rechunk=False)

    assert merge_spans(stacked, ["group"]).rows() == [(0, 0, 12), (1, 0, 2)]
    assert covered_ns(stacked, ["group"]).rows() == [(0, 12), (1, 2)]
