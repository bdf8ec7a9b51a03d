"""What a straggler costs: the step time saved when only that rank runs at its reference speed.

Each (rank, stage, kind) that is slower than its reference is scaled, action by action, by
``reference_ms / median_ms`` (the rank's noise stays, its systematic slowness goes; a row at or
above reference speed is left as it is: it has nothing to give back). The run is replayed with the
what-if timing engine (``tracekit.whatif``) and the saving is the realized replayed step time minus
the replayed one, averaged over steps. The replay holds compute and dependencies, so the saving is
the time the slowness puts on the step's critical path.

Not for: choosing the reference (``references``) or flagging (``scoring``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.whatif.case import ReplayCase


def speed_factors(case: ReplayCase, judged: pl.DataFrame) -> np.ndarray:
    """Per op of ``case``: ``min(1, reference_ms / median_ms)`` of its (rank, stage, kind) row, else 1.

    ``judged`` holds rank, stage, kind, median_ms and reference_ms (rows without a reference are
    ignored).
    """
    factors = judged.filter(pl.col("reference_ms").is_not_null() & (pl.col("median_ms") > 0)).select(
        "rank",
        "stage",
        pl.col("kind").alias("optype"),
        pl.min_horizontal(pl.lit(1.0), pl.col("reference_ms") / pl.col("median_ms")).alias("factor"),
    )
    keyed = case.ops.select("rank", "stage", "optype", "compute").with_row_index("row")
    joined = keyed.join(factors, on=["rank", "stage", "optype"], how="left").sort("row")
    return (
        joined.select(pl.when(pl.col("compute")).then(pl.col("factor")).otherwise(None).fill_null(1.0))
        .to_series()
        .to_numpy()
    )


class Pricer:
    """Replays one case with chosen ops at reference speed (the realized replay is computed once)."""

    def __init__(self, case: ReplayCase, factors: np.ndarray) -> None:
        self.case = case
        self.real = case.ops["duration_ms"].to_numpy()
        self.factors = factors
        self.realized_ms = float(case.replay_step_times(self.real).mean())

    def saving_ms(self, rows: np.ndarray) -> float:
        """Mean replayed step time saved when the ops in ``rows`` (a boolean mask) run at reference speed."""
        if (self.factors[rows] == 1.0).all():
            return 0.0  # nothing to give back: no replay needed
        faster = np.where(rows, self.real * self.factors, self.real)
        return float(self.realized_ms - self.case.replay_step_times(faster).mean())

    def rank_saving_ms(self, rank: int, kind: str | None = None) -> float:
        """``saving_ms`` of every op of ``rank`` (of ``kind`` only, when given)."""
        rows = self.case.ops["rank"] == rank
        if kind is not None:
            rows = rows & (self.case.ops["optype"] == kind)
        return self.saving_ms(rows.to_numpy())
