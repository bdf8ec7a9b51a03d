"""Interval arithmetic on frames of spans (``start_ns``, ``end_ns``): unions, grouped.

Pure functions over polars frames; shared by every analysis that asks "how much time was covered".
"""

from __future__ import annotations

import polars as pl


def merge_spans(spans: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Merge overlapping or touching spans within each ``by`` group into disjoint ones.

    Returns columns ``by`` + ``start_ns``, ``end_ns``, sorted; an empty input gives an empty frame.
    """
    ordered = spans.select(*by, "start_ns", "end_ns").sort(*by, "start_ns")
    reach = pl.col("end_ns").cum_max().shift(1)
    if by:
        reach = reach.over(by)
    segment = (pl.col("start_ns") > pl.col("_reach")).fill_null(True).cum_sum()
    if by:
        segment = segment.over(by)
    return (
        ordered.with_columns(reach.alias("_reach"))
        .with_columns(segment.alias("_segment"))
        .group_by(*by, "_segment", maintain_order=True)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_segment")
    )


def covered_ns(spans: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Total time covered by the union of spans per ``by`` group, as column ``covered_ns``."""
    return (
        merge_spans(spans, by)
        .group_by(*by, maintain_order=True)
        .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("covered_ns"))
    )
