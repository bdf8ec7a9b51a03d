"""What a straggler costs: the step time saved when only that rank runs at its ideal speed.

Each (rank, stage, kind) is put at ``ideal_ms / own_median_ms`` of its speed, action by action, by
the one ideal (``tracekit.analysis.ideal``: the lower of its own median and its reference, so the
factor is ``reference_ms / median_ms`` where it is slower than its reference and 1 where it is
not). An action at or below its median scales by the factor; one above keeps its excess over the
median (``tracekit.whatif.speed``): the rank's noise stays, its systematic slowness goes, and a
straggler is not credited with the descheduling its peers suffer as well. The run is replayed with the
what-if timing engine (``tracekit.whatif``) and the saving is the realized replayed step time minus
the replayed one, averaged over steps. Each op occupies its duration plus its gap (``gap_ms``: how
long after it was ready it started: transfer latency, launch and host work between actions;
negative where it started early), so the realized replay runs the recorded steps again, to the
nanosecond, and the saving is the time the slowness puts on the step's critical path, the transfers a
faster rank would expose included. Every row is priced in one batch of
counterfactuals (``tracekit.whatif.counterfactuals``), each replaying only what its ops reach.

Not for: choosing the reference (``references``) or flagging (``scoring``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from tracekit.analysis.ideal import Ideal
from tracekit.whatif.case import ReplayCase
from tracekit.whatif.counterfactuals import Change, Counterfactuals, rows_by
from tracekit.whatif.speed import at_speed


JUDGED_BASES = ("peers", "expected")
"""Ideals that straggler scoring judges against (``tracekit.analysis.references``); the others are not priced."""


def speed_factors(case: ReplayCase, ideal: Ideal) -> np.ndarray:
    """Per op of ``case``: ``ideal_ms / own_median_ms`` of its (rank, stage, optype, work), else 1.

    Only compute ops whose ideal is a judged reference (``JUDGED_BASES``) move. The ideal is never
    above the own median (``tracekit.analysis.ideal``), so a factor is at most 1: a rank at or
    above its reference speed has nothing to give back.
    """
    factors = ideal.table.select(
        "rank",
        "stage",
        "optype",
        "work",
        pl.when((pl.col("own_median_ms") > 0) & pl.col("basis").is_in(JUDGED_BASES))
        .then(pl.col("ideal_ms") / pl.col("own_median_ms"))
        .otherwise(1.0)
        .alias("factor"),
    )
    keyed = case.ops.select("rank", "stage", "optype", "work", "compute").with_row_index("row")
    joined = keyed.join(factors, on=["rank", "stage", "optype", "work"], how="left").sort("row")
    return (
        joined.select(pl.when(pl.col("compute")).then(pl.col("factor")).otherwise(None).fill_null(1.0))
        .to_series()
        .to_numpy()
    )


class Pricer:
    """Replays one case with chosen ops at reference speed, all choices in one batched replay.

    The counterfactuals share the realized durations as their base and each replays only the
    components its ops reach (``tracekit.whatif.counterfactuals``), so pricing every rank and
    every (rank, kind) costs about as much as a few replays of the whole run.
    """

    def __init__(self, case: ReplayCase, factors: np.ndarray) -> None:
        self.case = case
        self.real = case.ops["duration_ms"].to_numpy()
        self.factors = factors
        # Each op's group median on the clock its duration is on (the factor is a ratio of either clock).
        self.medians = (
            case.ops.select(pl.col("duration_ms").median().over("rank", "stage", "optype", "work"))
            .to_series()
            .to_numpy()
        )
        self._replays = Counterfactuals(case, case.occupied_ms(self.real))
        self.realized_ms = float(self._replays.base_steps.mean())

    def savings_ms(self, row_sets: Sequence[np.ndarray]) -> list[float]:
        """Per set of op rows: the mean replayed step time saved when those ops run at reference speed."""
        changes = [
            Change(rows, self.case.occupied_ms(at_speed(self.real[rows], self.factors[rows], self.medians[rows]), rows))
            for rows in row_sets
        ]
        # A set already at reference speed has nothing to give back: 0 without a replay.
        moving = [index for index, rows in enumerate(row_sets) if not (self.factors[rows] == 1.0).all()]
        steps = self._replays.step_times([changes[index] for index in moving])
        out = [0.0] * len(row_sets)
        for index, times in zip(moving, steps):
            out[index] = float(self.realized_ms - times.mean())
        return out

    def rank_savings_ms(self, keys: Sequence[tuple[int, str | None]]) -> list[float]:
        """``savings_ms`` of every op of each (rank, kind) in ``keys`` (kind None: the whole rank)."""
        by_rank = rows_by(self.case.ops, ["rank"])
        by_kind = rows_by(self.case.ops, ["rank", "optype"])
        empty = np.zeros(0, dtype=np.int64)
        return self.savings_ms(
            [
                by_rank.get((rank,), empty) if kind is None else by_kind.get((rank, kind), empty)
                for rank, kind in keys
            ]
        )
