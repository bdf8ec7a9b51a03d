"""What every view shares: the action-kind palette, inline chart data with its row cap, rank bands.

Chart data is handed to altair as a plain ``{"values": rows}`` dict built from a polars frame.
Altair's data transformers (and their ``MaxRowsError`` at 5,000 rows) only act on data frames, so
they never touch it, and no global transformer setting is changed: the row limit is ours,
``MAX_ROWS``, and every view aggregates (heatmaps, rank bands, one step) before it could reach it.
Exceeding it is a bug in a view, hence an assert. (``alt.InlineData`` would validate every row
against the schema on construction: seconds at tens of thousands of rows.)

Not for: computing metrics (``tracekit.analysis`` and friends) or assembling the page (``page``).
"""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import polars as pl

MAX_ROWS = 60_000
"""Most rows one chart embeds; at about 60 bytes a row this keeps a chart near 4 MB of JSON."""

KIND_ORDER: tuple[str, ...] = ("F", "B", "I", "W", "F&B")
"""Action kinds as charts name them: the four single actions and an overlapped F&B pair."""

KIND_COLORS: tuple[str, ...] = ("#0072B2", "#009E73", "#E69F00", "#CC79A7", "#D55E00")
"""Okabe-Ito colours (readable with colour-vision deficiency), in ``KIND_ORDER``."""

TIMELINES: tuple[str, ...] = ("realized", "ideal")
"""The two timelines every realized-against-ideal view sets side by side, in display order."""

TIMELINE_COLORS: tuple[str, ...] = ("#4C78A8", "#BAB0AC")
"""Realized in a calm blue, ideal in grey: the alarm colour (``#D55E00``) is kept for stragglers."""

WIDTH = 820
"""Width of a full-width chart, pixels."""

_DECIMALS = 4
"""Floats are rounded to this many decimals before embedding: ms to 0.1 us, fractions to 0.01%."""


def kind_color(field: str = "kind", title: str = "action") -> alt.Color:
    """Colour by action kind with the fixed palette, so F is the same blue in every view."""
    return alt.Color(
        f"{field}:N",
        scale=alt.Scale(domain=list(KIND_ORDER), range=list(KIND_COLORS)),
        title=title,
    )


def timeline_color(title: str = "timeline") -> alt.Color:
    """Colour realized against ideal with the fixed palette."""
    return alt.Color(
        "timeline:N", scale=alt.Scale(domain=list(TIMELINES), range=list(TIMELINE_COLORS)), title=title
    )


def inline(frame: pl.DataFrame) -> dict[str, list[dict[str, Any]]]:
    """``frame`` as inline chart data, floats rounded; asserts the view kept it under ``MAX_ROWS``."""
    assert frame.height <= MAX_ROWS, f"a view embeds {frame.height} rows (cap {MAX_ROWS}): aggregate first"
    rounded = frame.with_columns(pl.col(pl.Float32, pl.Float64).round(_DECIMALS))
    return {"values": rounded.to_dicts()}


def band_size(num_ranks: int, max_rows: int) -> int:
    """Ranks per band so that ``num_ranks`` ranks fit in ``max_rows`` rows (1: one row per rank)."""
    assert max_rows > 0
    return max(1, math.ceil(num_ranks / max_rows))


def with_rank_band(frame: pl.DataFrame, size: int) -> pl.DataFrame:
    """Add ``band`` (first rank of the band) and ``ranks`` (``"8-15"``, or ``"8"`` alone) columns."""
    first = (pl.col("rank") // size * size).cast(pl.Int32())
    label = (
        pl.when(pl.lit(size) == 1)
        .then(first.cast(pl.String()))
        .otherwise(
            pl.concat_str(
                first.cast(pl.String()),
                pl.lit("-"),
                pl.min_horizontal(first + size - 1, pl.col("rank").max()).cast(pl.String()),
            )
        )
    )
    return frame.with_columns(first.alias("band"), label.alias("ranks"))


def check_columns(frame: pl.DataFrame, schema: dict[str, pl.DataType], view: str) -> pl.DataFrame:
    """``frame`` reduced to ``schema``'s columns; asserts they are there with their dtypes.

    Views are fed by ``build`` from library tables, so a mismatch is a bug, not user input.
    """
    for name, dtype in schema.items():
        assert name in frame.columns, f"{view}: input lacks column {name!r} (has {frame.columns})"
        assert frame.schema[name] == dtype, (
            f"{view}: column {name!r} is {frame.schema[name]}, expected {dtype}"
        )
    return frame.select(list(schema))
