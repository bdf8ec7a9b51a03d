"""Per-rank, per-step utilization of the realized schedule: busy time, bubble time, action counts.

Definitions (docs/metrics.md repeats them):
- **step window**: from the earliest action start on any rank to the latest action end on any
  rank in that step. Every rank is judged over the same window, so it covers the pipeline fill
  (ranks waiting for their first input) and drain (ranks done before the last backward).
- **busy**: the length of the union of the rank's compute-action spans inside the step (an F&B
  pair's halves count once where they overlap); communication waits are not compute.
- **bubble** = window - busy; **bubble_fraction** = bubble / window.
A rank's whole-run figures add windows and busy times over steps: bubble_fraction =
sum(bubble) / sum(window). With data-parallel replicas the window stays the step's across *all*
ranks (the gradient all-reduce after the step joins the replicas, so the step ends when the last
replica does); ``replica_utilization`` adds per replica its own **span** (its ranks' first action
start to last action end in the step), so the replica that holds the step back shows.

``step_utilization`` / ``rank_utilization`` (rank_utilization adds ``steps`` and has no ``step``):

| column | dtype | meaning |
|---|---|---|
| rank, step | Int32 | which rank, which step |
| replica | Int32 | the rank's data-parallel replica (``tracekit.analysis.realized``) |
| window_ns, busy_ns, bubble_ns | Int64 | as defined above, ns |
| bubble_fraction | Float64 | bubble_ns / window_ns |
| F, B, I, W | UInt32 | actions of each kind the rank ran in the step |

``replica_utilization``, one row per replica:

| column | dtype | meaning |
|---|---|---|
| replica | Int32 | data-parallel replica |
| ranks | UInt32 | ranks of the replica |
| steps | UInt32 | steps it ran |
| span_ns | Int64 | its own span summed over steps, ns |
| window_ns, busy_ns, bubble_ns | Int64 | its ranks' figures summed, ns |
| bubble_fraction | Float64 | bubble_ns / window_ns |

Not for: reading the actions (``tracekit.analysis.realized``) or GPU busy time (``tracekit.gpu.breakdown``).
"""

from __future__ import annotations

import polars as pl

from tracekit.analysis.intervals import covered_ns
from tracekit.schedule.action import KIND_CODES


def step_windows(actions: pl.DataFrame) -> pl.DataFrame:
    """Each step's window across all ranks: ``step``, ``window_start_ns``, ``window_end_ns``."""
    return actions.group_by("step").agg(
        pl.col("start_ns").min().alias("window_start_ns"), pl.col("end_ns").max().alias("window_end_ns")
    )


def step_utilization(actions: pl.DataFrame) -> pl.DataFrame:
    """Busy, bubble and action counts per (rank, step) of a realized-schedule frame."""
    windows = step_windows(actions)
    busy = covered_ns(actions, ["rank", "step"]).rename({"covered_ns": "busy_ns"})
    counts = actions.group_by("rank", "replica", "step").agg(
        *((pl.col("kind") == code).sum().alias(code) for code in KIND_CODES)
    )
    return (
        busy.join(windows, on="step")
        .join(counts, on=["rank", "step"])
        .with_columns((pl.col("window_end_ns") - pl.col("window_start_ns")).alias("window_ns"))
        .with_columns((pl.col("window_ns") - pl.col("busy_ns")).alias("bubble_ns"))
        .with_columns((pl.col("bubble_ns") / pl.col("window_ns")).alias("bubble_fraction"))
        .select(
            "rank", "replica", "step", "window_ns", "busy_ns", "bubble_ns", "bubble_fraction", *KIND_CODES
        )
        .sort("rank", "step")
    )


def rank_utilization(per_step: pl.DataFrame) -> pl.DataFrame:
    """Whole-run figures per rank from ``step_utilization``: sums over steps, bubble as a fraction of them."""
    return (
        per_step.group_by("rank", "replica")
        .agg(
            pl.len().alias("steps"),
            pl.col("window_ns").sum(),
            pl.col("busy_ns").sum(),
            pl.col("bubble_ns").sum(),
            *(pl.col(code).sum() for code in KIND_CODES),
        )
        .with_columns((pl.col("bubble_ns") / pl.col("window_ns")).alias("bubble_fraction"))
        .select(
            "rank", "replica", "steps", "window_ns", "busy_ns", "bubble_ns", "bubble_fraction", *KIND_CODES
        )
        .sort("rank")
    )


def replica_utilization(actions: pl.DataFrame, per_step: pl.DataFrame) -> pl.DataFrame:
    """Whole-run figures per data-parallel replica: its own span beside its ranks' busy and bubble time."""
    spans = (
        actions.group_by("replica", "step")
        .agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("span_ns"))
        .group_by("replica")
        .agg(pl.len().cast(pl.UInt32()).alias("steps"), pl.col("span_ns").sum())
    )
    ranks = per_step.group_by("replica").agg(
        pl.col("rank").n_unique().cast(pl.UInt32()).alias("ranks"),
        pl.col("window_ns").sum(),
        pl.col("busy_ns").sum(),
        pl.col("bubble_ns").sum(),
    )
    return (
        ranks.join(spans, on="replica")
        .with_columns((pl.col("bubble_ns") / pl.col("window_ns")).alias("bubble_fraction"))
        .select(
            "replica", "ranks", "steps", "span_ns", "window_ns", "busy_ns", "bubble_ns", "bubble_fraction"
        )
        .sort("replica")
    )
