"""How much communication is hidden under compute, per rank and communication class.

For each rank and each communication class c (``tracekit.gpu.kernel_classes.COMM_CLASSES``, plus
``all`` for every communication kernel together):
- **comm_ns**: union of the active spans of class c (p2p waiting excluded, ``tracekit.gpu.breakdown``);
- **overlap_ns** = |comm_c ∩ compute|, compute being the union of the rank's compute kernels;
- **overlap_pct** = 100 * overlap_ns / comm_ns;
- **exposed_ns** = comm_ns - overlap_ns: communication the rank's compute did not hide.

Not for: HTA's single overlap figure (``tracekit.gpu.hta_compat``).
"""

from __future__ import annotations

import polars as pl

from tracekit.analysis.intervals import covered_by, merge_spans
from tracekit.gpu.breakdown import active_spans
from tracekit.gpu.kernel_classes import COMMUNICATION, COMPUTE

ALL_COMM = "all"

OVERLAP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "comm_class": pl.String(),
    "comm_ns": pl.Int64(),
    "overlap_ns": pl.Int64(),
    "exposed_ns": pl.Int64(),
    "overlap_pct": pl.Float64(),
}
"""One row per (rank, communication class present on it), plus ``all``; ns and percent as above."""


def comm_overlap(waited: pl.DataFrame) -> pl.DataFrame:
    """``OVERLAP_SCHEMA`` rows from ``p2p_waits`` output; empty when no rank communicates."""
    active = active_spans(waited)
    compute = merge_spans(active.filter(pl.col("kernel_class") == COMPUTE), ["rank"])
    by_class = merge_spans(active.filter(pl.col("kernel_class") == COMMUNICATION), ["rank", "comm_class"])
    every = merge_spans(by_class, ["rank"]).select(
        "rank", pl.lit(ALL_COMM).alias("comm_class"), "start_ns", "end_ns"
    )
    return (
        covered_by(pl.concat([by_class, every]), compute, ["rank", "comm_class"], ["rank"])
        .rename({"covered_ns": "comm_ns"})
        .with_columns(
            (pl.col("comm_ns") - pl.col("overlap_ns")).alias("exposed_ns"),
            (100 * pl.col("overlap_ns") / pl.col("comm_ns")).alias("overlap_pct"),
        )
        .select(list(OVERLAP_SCHEMA))
        .cast(OVERLAP_SCHEMA)  # type: ignore[arg-type]
        .sort("rank", pl.col("comm_class") == ALL_COMM, "comm_class")
    )
