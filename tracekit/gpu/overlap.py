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

from tracekit.analysis.intervals import covered_ns, merge_spans, overlap_ns
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
    compute = merge_spans(active.filter(pl.col("kernel_class") == COMPUTE), ["rank"])  # once, not per class
    comm = active.filter(pl.col("kernel_class") == COMMUNICATION)
    comm = pl.concat([comm, comm.with_columns(pl.lit(ALL_COMM).alias("comm_class"))])
    by = ["rank", "comm_class"]
    compute_by_class = comm.select(by).unique().join(compute, on="rank")
    return (
        covered_ns(comm, by)
        .rename({"covered_ns": "comm_ns"})
        .join(overlap_ns(comm, compute_by_class, by), on=by, how="left")
        .with_columns(pl.col("overlap_ns").fill_null(0))
        .with_columns(
            (pl.col("comm_ns") - pl.col("overlap_ns")).alias("exposed_ns"),
            (100 * pl.col("overlap_ns") / pl.col("comm_ns")).alias("overlap_pct"),
        )
        .select(list(OVERLAP_SCHEMA))
        .cast(OVERLAP_SCHEMA)  # type: ignore[arg-type]
        .sort("rank", pl.col("comm_class") == ALL_COMM, "comm_class")
    )
