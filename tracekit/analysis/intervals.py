"""Interval arithmetic on frames of spans (``start_ns``, ``end_ns``): unions, grouped.

Pure functions over polars frames; shared by every analysis that asks "how much time was covered".
A union's pass over sorted spans runs compiled (``_spans.c``, built at install where a C compiler is
present) where the spans have no null time; polars queries do the same otherwise.

Not for: what the spans mean (actions, kernels): the analyses that call these functions decide.
"""

from __future__ import annotations

from array import array

import polars as pl

try:
    from tracekit.analysis import _spans
except ImportError:  # installed without a C compiler: the polars road
    _spans = None

_OFFSET_LIMIT = 2**62
"""Most a group's offset on the shared time axis may reach (int64 holds 2**63 - 1)."""


def merge_spans(spans: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Merge overlapping or touching spans within each ``by`` group into disjoint ones.

    Returns columns ``by`` + ``start_ns``, ``end_ns``, sorted; an empty input gives an empty frame.

    Sorted by group, then start (``_grouped``); then one running maximum of the ends over the whole
    frame: each group's times are moved past the previous group's (``group index * width`` of the
    times), so the running maximum starts afresh in each group without a window per group, and a
    merged span's end is the running maximum on its last row. Where those offsets would pass
    ``_OFFSET_LIMIT``, a windowed running maximum per group does the same.
    """
    ordered = _grouped(spans.select(*by, "start_ns", "end_ns"), by, "start_ns")
    if ordered.is_empty():
        return ordered.drop("_group")
    if _compiled(ordered):
        first, end = _spans.merge_sorted(*_columns(ordered, by))
        return ordered.select(*by, "start_ns")[_int64(first)].with_columns(_int64(end).alias("end_ns"))
    low, high = ordered["start_ns"].min(), ordered["end_ns"].max()
    width = max(int(high) - int(low), 0) + 1  # type: ignore[arg-type]
    if width * ordered.height >= _OFFSET_LIMIT:
        return _merge_spans_windowed(ordered.drop("_group"), by)
    opens = (pl.col("start_ns") + pl.col("_offset") > pl.col("_reach").shift(1)).fill_null(True)
    closes = pl.col("_opens").shift(-1, fill_value=True)
    reach = pl.col("_reach") - pl.col("_offset")
    return (
        ordered.lazy()
        .with_columns((pl.col("_group") * width - low).alias("_offset"))
        .with_columns((pl.col("end_ns") + pl.col("_offset")).cum_max().alias("_reach"))
        .with_columns(opens.alias("_opens"))
        .filter(pl.col("_opens") | closes)  # each merged span's first and last rows (one row when alone)
        .with_columns(pl.when(closes).then(reach).otherwise(reach.shift(-1)).alias("end_ns"))
        .filter(pl.col("_opens"))
        .select(*by, "start_ns", "end_ns")
        .collect()
    )


def _compiled(ordered: pl.DataFrame) -> bool:
    """True when ``_spans`` is built and ``ordered``'s times are int64 without a null."""
    times = (ordered["start_ns"], ordered["end_ns"])
    return _spans is not None and all(time.dtype == pl.Int64() and not time.null_count() for time in times)


def _columns(ordered: pl.DataFrame, by: list[str]) -> tuple[pl.Series | None, pl.Series, pl.Series]:
    """What ``_spans`` reads of ``ordered`` (``_grouped``): group index (None: one group), start, end."""
    return ordered["_group"] if by else None, ordered["start_ns"], ordered["end_ns"]


def _int64(values: bytes) -> pl.Series:
    """Int64 values returned by ``_spans`` (native-endian bytes) as a series (no numpy: its import
    costs a command more than the passes save)."""
    column = array("q")
    column.frombytes(values)
    return pl.Series(column, dtype=pl.Int64())


def _grouped(frame: pl.DataFrame, by: list[str], at: str) -> pl.DataFrame:
    """``frame`` sorted by ``by`` (nulls first), then ``at``, with ``_group``: each row's group's
    index in that order (Int64, from 0).

    By ``at``, then stably by group: half the CPU of one sort on both keys, whose rows polars
    encodes first. Several ``by`` columns are first ranked together into one integer (a dense rank
    of their struct orders as the columns do), which sorts in half the time of the columns themselves.
    """
    ordered = frame.sort(at)
    if not by:
        return ordered.with_columns(pl.lit(0, pl.Int64()).alias("_group"))
    if len(by) > 1:
        ranked = ordered.with_columns((pl.struct(by).rank("dense").cast(pl.Int64()) - 1).alias("_group"))
        return ranked.sort("_group", maintain_order=True)
    (column,) = by
    change = pl.col(column).ne_missing(pl.col(column).shift(1)).fill_null(True)
    return ordered.sort(column, maintain_order=True).with_columns(
        (change.cast(pl.Int64()).cum_sum() - 1).alias("_group")
    )


def _sorted_by(frame: pl.DataFrame, by: list[str], at: str) -> pl.DataFrame:
    """``frame`` sorted by ``by`` (nulls first), then ``at`` (``_grouped`` without its index)."""
    if len(by) > 1:
        return _grouped(frame, by, at).drop("_group")
    ordered = frame.sort(at)
    return ordered.sort(by, maintain_order=True) if by else ordered


def _merge_spans_windowed(ordered: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``merge_spans`` of spans sorted by ``by`` and ``start_ns``, with a running maximum per group."""
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
    if _spans is not None:  # without it, merge_spans sorts the spans once
        ordered = _grouped(spans.select(*by, "start_ns", "end_ns"), by, "start_ns")
        if not ordered.is_empty() and _compiled(ordered):
            first, covered = _spans.covered_sorted(*_columns(ordered, by))
            total = _int64(covered).alias("covered_ns")
            return ordered.select(by)[_int64(first)].with_columns(total) if by else total.to_frame()
    return (
        merge_spans(spans, by)
        .group_by(*by, maintain_order=True)
        .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("covered_ns"))
    )


def _sweep(first: pl.DataFrame, second: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Elementary segments of two span sets: ``by``, ``start_ns``, ``end_ns``, ``in_first``, ``in_second``.

    Each side is merged first, so within a side spans are disjoint and the running count is 0 or 1.
    Every span adds its weight at its start and takes it back at its end, so a group's running count
    ends at 0: one running count over the whole frame, sorted by group, is each group's own, and a
    segment with a count is never the last of its group. Segments covered by neither side are left out.
    """
    edges = []
    for spans, weight in ((merge_spans(first, by), 1), (merge_spans(second, by), 2)):
        edges.append(
            spans.select(*by, pl.col("start_ns").alias("at_ns"), pl.lit(weight, pl.Int8()).alias("delta"))
        )
        edges.append(
            spans.select(*by, pl.col("end_ns").alias("at_ns"), pl.lit(-weight, pl.Int8()).alias("delta"))
        )
    ordered = _sorted_by(pl.concat(edges), by, "at_ns")
    return (
        ordered.lazy()
        .with_columns(
            pl.col("delta").cast(pl.Int32()).cum_sum().alias("_state"),
            pl.col("at_ns").shift(-1).alias("end_ns"),
        )
        .filter((pl.col("_state") != 0) & (pl.col("end_ns") > pl.col("at_ns")))
        .select(
            *by,
            pl.col("at_ns").alias("start_ns"),
            "end_ns",
            (pl.col("_state") % 2 == 1).alias("in_first"),
            (pl.col("_state") >= 2).alias("in_second"),
        )
        .collect()
    )


def intersect_spans(first: pl.DataFrame, second: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The spans covered by both ``first`` and ``second`` within each ``by`` group (disjoint, sorted)."""
    both = _sweep(first, second, by).filter(pl.col("in_first") & pl.col("in_second"))
    return merge_spans(both, by)


def subtract_spans(first: pl.DataFrame, second: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The parts of ``first`` not covered by ``second`` within each ``by`` group (disjoint, sorted)."""
    only = _sweep(first, second, by).filter(pl.col("in_first") & ~pl.col("in_second"))
    return merge_spans(only, by)


def overlap_ns(first: pl.DataFrame, second: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """|union(first) ∩ union(second)| per ``by`` group as ``overlap_ns`` (groups without overlap absent)."""
    return covered_ns(intersect_spans(first, second, by), by).rename({"covered_ns": "overlap_ns"})


def covered_by(spans: pl.DataFrame, union: pl.DataFrame, by: list[str], on: list[str]) -> pl.DataFrame:
    """Per ``by`` group of disjoint ``spans``: their time (``covered_ns``) and the part of it that
    ``union`` covers (``overlap_ns``), ``union`` being disjoint spans (``merge_spans``) per ``on`` group,
    ``on`` a part of ``by``. One union serves every group that shares its ``on`` key (each
    communication class of a rank against the rank's compute) without a copy per group.

    The union's time before t is C(t) = (its spans' time before the last span starting at or before
    t) + (that span's part before t), found by an as-of join of every span's two ends on the union's
    starts; a span's overlap is C(end) - C(start). The time before each union span is one running sum
    over the whole union sorted by group: a difference within one group does not see the groups
    before it. A zero-length span first in each ``on`` group answers for times before its first span;
    a group whose ``on`` key has no union span overlaps 0.
    """
    lengths = pl.col("end_ns") - pl.col("start_ns")
    floor = -(2**62)
    if on:
        firsts = union.select(on).unique().with_columns(pl.lit(floor, pl.Int64()).alias("start_ns"))
    else:
        firsts = pl.DataFrame({"start_ns": [floor]}, schema={"start_ns": pl.Int64()})
    firsts = firsts.with_columns(pl.col("start_ns").alias("end_ns"))
    coverage = (
        _sorted_by(pl.concat([firsts, union.select(*on, "start_ns", "end_ns")]), on, "start_ns")
        .with_columns((lengths.cum_sum() - lengths).alias("_before_ns"))
        .sort("start_ns")
    )
    ends = pl.concat(
        [
            spans.select(*by, pl.col("start_ns").alias("_at_ns"), pl.lit(-1, pl.Int64()).alias("_sign")),
            spans.select(*by, pl.col("end_ns").alias("_at_ns"), pl.lit(1, pl.Int64()).alias("_sign")),
        ]
    ).sort("_at_ns")
    before_at = pl.col("_before_ns") + pl.min_horizontal("_at_ns", "end_ns") - pl.col("start_ns")
    sums = (
        (pl.col("_sign") * pl.col("_at_ns")).sum().alias("covered_ns"),
        (pl.col("_sign") * before_at).sum().fill_null(0).alias("overlap_ns"),
    )
    # both sides are sorted by time over the whole frame, so within every group too
    joined = ends.join_asof(
        coverage,
        left_on="_at_ns",
        right_on="start_ns",
        by=on or None,
        strategy="backward",
        check_sortedness=False,
    )
    if not by:
        return joined.select(*sums)
    return joined.group_by(*by).agg(*sums).sort(by)


def covered_bins(spans: pl.DataFrame, by: list[str], width: float, bins: int) -> pl.DataFrame:
    """Time covered by the union of spans per ``by`` group and time bin ``[b * width, (b + 1) * width)``.

    ``spans`` holds ``by`` + ``start_ns``, ``end_ns`` (any one unit; ``width`` in it); spans past the
    last bin count toward it. Returns ``by`` + ``bin`` (Int32) + ``covered``, only bins with spans.
    """
    merged = merge_spans(spans, by)
    last_bin = bins - 1
    lo = (pl.col("start_ns") / width).floor().cast(pl.Int32()).clip(0, last_bin)
    hi = ((pl.col("end_ns") / width).ceil().cast(pl.Int32()) - 1).clip(0, last_bin)
    return (
        merged.with_columns(pl.int_ranges(lo, pl.max_horizontal(lo, hi) + 1, dtype=pl.Int32()).alias("bin"))
        .explode("bin")
        .with_columns(
            (
                pl.min_horizontal(pl.col("end_ns"), (pl.col("bin") + 1) * width)
                - pl.max_horizontal(pl.col("start_ns"), pl.col("bin") * width)
            )
            .clip(0.0)
            .alias("covered")
        )
        .select(*by, "bin", "covered")
    )
