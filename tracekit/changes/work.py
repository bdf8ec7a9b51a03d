"""Work one run has and the other not, and each rank's bubble and overlap in both runs.

- New and vanished work: the op types each stage ran (``F``, ``B``, ``I``, ``W``, ``F&B``), per
  rank when the runs share a layout, and on GPU traces the communication classes each rank ran
  (``tracekit.gpu.overlap``). A split backward (``I`` + ``W``) where BASE ran ``B`` shows here.
- Per rank: bubble fraction (``tracekit.analysis.utilization``: idle share of the step windows),
  busy time per step and, on GPU traces, the share of communication overlapped with compute.

``WORK_SCHEMA``, one row per piece of work that only one run has:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| change | String | ``new`` (only NEW has it) or ``vanished`` (only BASE) | never null |
| what | String | ``kind`` (an op type on a stage) or ``comm`` (a communication class) | never null |
| rank | Int32 | the rank | compared per stage (``allow_different``) |
| stage | Int32 | the stage | a communication class |
| name | String | the op type or communication class | never null |
| ops | Int64 | how many the run that has it ran | never null |

``RANK_CHANGE_SCHEMA``, one row per rank of either run:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | the rank | never null |
| base_bubble_pct, new_bubble_pct | Float64 | bubble fraction of the rank's step windows, percent | the run lacks the rank |
| bubble_change_pct | Float64 | new - base, percentage points | either is null |
| base_busy_ms, new_busy_ms | Float64 | busy (compute) time per step, ms | the run lacks the rank |
| busy_change_ms | Float64 | new - base, ms | either is null |
| base_overlap_pct, new_overlap_pct | Float64 | communication overlapped with compute, percent (GPU traces) | no GPU communication |
| overlap_change_pct | Float64 | new - base, percentage points | either is null |

Not for: what the changes cost (``tracekit.changes.explain``).
"""

from __future__ import annotations

import polars as pl

WORK_SCHEMA: dict[str, pl.DataType] = {
    "change": pl.String(),
    "what": pl.String(),
    "rank": pl.Int32(),
    "stage": pl.Int32(),
    "name": pl.String(),
    "ops": pl.Int64(),
}

RANK_CHANGE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "base_bubble_pct": pl.Float64(),
    "new_bubble_pct": pl.Float64(),
    "bubble_change_pct": pl.Float64(),
    "base_busy_ms": pl.Float64(),
    "new_busy_ms": pl.Float64(),
    "busy_change_ms": pl.Float64(),
    "base_overlap_pct": pl.Float64(),
    "new_overlap_pct": pl.Float64(),
    "overlap_change_pct": pl.Float64(),
}


def _only_in(one: pl.DataFrame, other: pl.DataFrame, key: list[str], change: str, what: str) -> pl.DataFrame:
    return one.join(other.select(key), on=key, how="anti").with_columns(
        pl.lit(change).alias("change"), pl.lit(what).alias("what")
    )


def new_and_vanished(
    base_ops: pl.DataFrame,
    new_ops: pl.DataFrame,
    by_rank: bool,
    base_overlap: pl.DataFrame | None = None,
    new_overlap: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """``WORK_SCHEMA``: op types per (rank,) stage, and GPU communication classes per rank, in one run only.

    ``*_ops`` hold rank, stage, optype per op instance; ``*_overlap`` are ``OVERLAP_SCHEMA`` frames
    (None without GPU events).
    """
    key = ["rank", "stage", "name"] if by_rank else ["stage", "name"]

    def kinds(ops: pl.DataFrame) -> pl.DataFrame:
        return ops.rename({"optype": "name"}).group_by(key).agg(pl.len().cast(pl.Int64()).alias("ops"))

    parts = [
        _only_in(kinds(new_ops), kinds(base_ops), key, "new", "kind"),
        _only_in(kinds(base_ops), kinds(new_ops), key, "vanished", "kind"),
    ]
    if base_overlap is not None or new_overlap is not None:
        empty = pl.DataFrame(schema={"rank": pl.Int32(), "comm_class": pl.String()})

        def comms(frame: pl.DataFrame | None) -> pl.DataFrame:
            frame = empty if frame is None else frame.filter(pl.col("comm_class") != "all")
            return frame.select(
                "rank", pl.col("comm_class").alias("name"), pl.lit(1, pl.Int64()).alias("ops")
            )

        comm_key = ["rank", "name"]
        parts += [
            _only_in(comms(new_overlap), comms(base_overlap), comm_key, "new", "comm"),
            _only_in(comms(base_overlap), comms(new_overlap), comm_key, "vanished", "comm"),
        ]
    columns = list(WORK_SCHEMA)
    out = [
        part.with_columns(*(pl.lit(None).alias(c) for c in columns if c not in part.columns))
        .select(columns)
        .cast(WORK_SCHEMA)  # type: ignore[arg-type]
        for part in parts
    ]
    return pl.concat(out).sort("change", "what", "rank", "stage", "name", nulls_last=True)


def rank_changes(
    base_per_rank: pl.DataFrame,
    new_per_rank: pl.DataFrame,
    base_overlap: pl.DataFrame | None = None,
    new_overlap: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """``RANK_CHANGE_SCHEMA`` from two runs' per-rank utilization (``rank_utilization``) and GPU overlap."""

    def figures(per_rank: pl.DataFrame, overlap: pl.DataFrame | None, run: str) -> pl.DataFrame:
        out = per_rank.select(
            pl.col("rank").cast(pl.Int32()),
            (100.0 * pl.col("bubble_fraction")).alias(f"{run}_bubble_pct"),
            (pl.col("busy_ns") / pl.col("steps") / 1e6).alias(f"{run}_busy_ms"),
        )
        if overlap is None:
            return out.with_columns(pl.lit(None, pl.Float64()).alias(f"{run}_overlap_pct"))
        share = overlap.filter(pl.col("comm_class") == "all").select(
            pl.col("rank").cast(pl.Int32()), pl.col("overlap_pct").alias(f"{run}_overlap_pct")
        )
        return out.join(share, on="rank", how="left")

    joined = figures(base_per_rank, base_overlap, "base").join(
        figures(new_per_rank, new_overlap, "new"), on="rank", how="full", coalesce=True
    )
    return (
        joined.with_columns(
            (pl.col("new_bubble_pct") - pl.col("base_bubble_pct")).alias("bubble_change_pct"),
            (pl.col("new_busy_ms") - pl.col("base_busy_ms")).alias("busy_change_ms"),
            (pl.col("new_overlap_pct") - pl.col("base_overlap_pct")).alias("overlap_change_pct"),
        )
        .select(list(RANK_CHANGE_SCHEMA))
        .cast(RANK_CHANGE_SCHEMA)  # type: ignore[arg-type]
        .sort("rank")
    )
