"""The compiled pass of span unions (tracekit/analysis/_spans.c) itself: built, and strict about
what it reads. Its results against the polars road are tests/gpu/test_intervals.py's."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.analysis import intervals

_spans = intervals._spans


def test_the_compiled_union_is_built() -> None:
    assert _spans is not None, "tracekit/analysis/_spans.c was not compiled at install"


@pytest.mark.skipif(_spans is None, reason="the compiled pass is not built")
@pytest.mark.parametrize(
    ("start", "end", "fault"),
    [
        (pl.Series([1.0]), pl.Series([2.0]), "not int64"),
        (pl.Series([1, None]), pl.Series([2, 3]), "holds nulls"),
        (pl.Series([1, 2]), pl.Series([3]), "differ in length"),
    ],
)
def test_a_column_it_cannot_read_is_refused(start, end, fault: str) -> None:
    """Never sent by ``intervals`` (only int64 columns without nulls), but a wrong call is a clear
    error, never memory read past a column's end."""
    with pytest.raises(TypeError, match=fault):
        _spans.merge_sorted(None, start, end)
    with pytest.raises(TypeError, match=fault):
        _spans.covered_sorted(None, start, end)
