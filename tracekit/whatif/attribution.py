"""Slowdown of a realized run against its idealized replay, and who it is attributed to.

Definitions (Lin et al., OSDI 2025; numbers as their artifact computes them):

- *realized* step time: the dependency graph replayed with every op's own duration. By default
  (``replay="recorded"``) each op also starts its recorded gap after what it waits for
  (``ReplayCase.occupied_ms``: transfer latency, launch and host work), so the realized replay is
  the measured step, the one straggler prices are taken against; ``replay="durations"`` is the
  artifact's replay without gaps (its ``step_t_nodelay``). Op-tables have no gaps: both agree;
- *ideal* step time: the same replay with each op at its ideal duration
  (``tracekit.analysis.ideal``, whose ``IDEAL_DEFINITION`` every output quotes; ``osdi25``: the
  artifact's mean per op type for compute ops, median for communication ops), the gaps kept as
  recorded when the realized replay keeps them;
- slowdown ``S = mean(realized) / mean(ideal)`` (Eq. 1);
- attribution to a group G (an op type, a DP rank, a stage, a worker): replay the ideal with only
  G's real durations restored; ``S_G = mean(T_G) / mean(ideal)`` (Eq. 2). S_G > S is possible (the
  other groups' real durations may be below typical);
- ``M_S`` and ``M_W`` (§5): the share of ``realized - ideal`` removed when the last stage
  (M_S), or the ``ceil(3% of workers)`` workers with the highest worker score (M_W), get typical
  durations: ``rem = (T_real - T_rem) / (T_real - T_ideal)``. The worker score is the artifact's
  ``min(S_dp_rank, S_stage)`` (Eq. 4), where a worker holding several stages (DualPipe, V shapes)
  takes the highest S_stage of its stages; ``add`` is the converse (only that group real, from ideal);
- ``by_rank`` replays each worker on its own (exact, one counterfactual per worker).

Every group of every dimension is one counterfactual of the ideal; they replay together, each only
over the components of the graph its ops reach (``tracekit.whatif.counterfactuals``), so the cost
grows with the run's size, not with its size times its ranks.

Not for: judging durations without replay (``tracekit.stragglers.scoring``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from tracekit.analysis.choices import REPLAYS as REPLAYS
from tracekit.analysis.choices import Replay as Replay
from tracekit.analysis.choices import WhatIfConfig as WhatIfConfig
from tracekit.analysis.ideal import IdealConfig, ideal_durations
from tracekit.whatif.case import ReplayCase
from tracekit.whatif.counterfactuals import Change, Counterfactuals, rows_by


@dataclass(frozen=True)
class Counterfactual:
    """Effect of one group of ops: removed from the realized run, or added alone to the ideal."""

    group: str
    """Which ops, in words (``stage 3``, ``ranks 7``)."""
    realized_ms: float
    ideal_ms: float
    removed_ms: float
    """Mean step time with the group at typical durations, the rest real."""
    added_ms: float
    """Mean step time with only the group real, the rest typical."""

    @property
    def removed_share(self) -> float:
        """Share of the slowdown that goes away without the group (M_S, M_W)."""
        return (self.realized_ms - self.removed_ms) / (self.realized_ms - self.ideal_ms)

    @property
    def added_share(self) -> float:
        """Share of the slowdown the group causes on its own."""
        return (self.added_ms - self.ideal_ms) / (self.realized_ms - self.ideal_ms)


@dataclass(frozen=True)
class WhatIf:
    """What-if result of one run; times in ms, per-step arrays in ``steps`` order."""

    steps: tuple[int, ...]
    replay: Replay
    """How the ops occupied the replays (``WhatIfConfig.replay``)."""
    measured_ms: np.ndarray
    realized_ms: np.ndarray
    ideal_ms: np.ndarray
    by_optype: dict[str, float]
    by_dp_rank: dict[int, float]
    by_stage: dict[int, float]
    by_rank: dict[int, float]
    per_step: pl.DataFrame
    """Long frame: dimension (String), group (String), step (Int64), slowdown (Float64)."""
    ms: Counterfactual
    mw: Counterfactual
    worker_scores: dict[int, float] = field(repr=False)

    @property
    def slowdown(self) -> float:
        """S: mean realized over mean ideal step time."""
        return float(self.realized_ms.mean() / self.ideal_ms.mean())

    @property
    def launch_slowdown(self) -> float:
        """Measured over realized: time the replay does not explain (launch gaps, unmodelled work)."""
        return float(self.measured_ms.mean() / self.realized_ms.mean())


def _by(case: ReplayCase, column: str, real: np.ndarray) -> tuple[list, list[Change]]:
    """The groups of ``column`` and, per group, the ideal with only that group's real durations."""
    groups = rows_by(case.ops, [column])
    values = sorted(key for (key,) in groups)
    return values, [Change(groups[(value,)], real[groups[(value,)]]) for value in values]


def _attributed(case: ReplayCase, column: str, values: list, steps: np.ndarray, ideal_steps: np.ndarray):
    """Per group of ``column``: overall S_G (highest first) and per-step rows, from its replayed ``steps``."""
    overall: dict = {}
    rows: list[dict] = []
    for value, times in zip(values, steps):
        overall[value] = float(times.mean() / ideal_steps.mean())
        rows += [
            {"dimension": column, "group": str(value), "step": step, "slowdown": float(t / i)}
            for step, t, i in zip(case.steps, times, ideal_steps)
        ]
    ranked = dict(sorted(overall.items(), key=lambda item: -item[1]))
    return ranked, rows


def counterfactual(
    real_runs: Counterfactuals, ideal_runs: Counterfactuals, rows: np.ndarray, group: str
) -> Counterfactual:
    """Remove ``rows``' (a boolean mask) real durations from the realized run, and add only them to the ideal.

    ``real_runs`` and ``ideal_runs`` replay changes of the real and the ideal durations of one case.
    """
    positions = np.flatnonzero(rows)
    real, ideal = real_runs.base, ideal_runs.base
    (removed,) = real_runs.step_times([Change(positions, ideal[positions])])
    (added,) = ideal_runs.step_times([Change(positions, real[positions])])
    return Counterfactual(
        group=group,
        realized_ms=float(real_runs.base_steps.mean()),
        ideal_ms=float(ideal_runs.base_steps.mean()),
        removed_ms=float(removed.mean()),
        added_ms=float(added.mean()),
    )


def worker_scores(
    case: ReplayCase, by_dp_rank: dict[int, float], by_stage: dict[int, float]
) -> dict[int, float]:
    """The artifact's worker score (Eq. 4): min of its DP rank's and its stage's attribution.

    A worker holding several stages takes the highest of their attributions: the worst stage it runs.
    """
    workers = case.ops.group_by("rank").agg(pl.col("dp_rank").first(), pl.col("stage").unique())
    return {
        int(rank): min(by_dp_rank[dp], max(by_stage[stage] for stage in stages))
        for rank, dp, stages in workers.sort("rank").iter_rows()
    }


def what_if(case: ReplayCase, config: WhatIfConfig | None = None, ideal: np.ndarray | None = None) -> WhatIf:
    """Realized vs ideal replay, attribution by op type, DP rank, stage and worker, M_S and M_W.

    ``ideal`` holds each op's ideal duration (``tracekit.analysis.ideal.Ideal.per_op``); None: the
    default ideal of the case's source (``IdealConfig``).
    """
    config = config or WhatIfConfig()
    real = case.ops["duration_ms"].to_numpy()
    if ideal is None:
        ideal = ideal_durations(case.ops, IdealConfig().method_for(case.source)).per_op(case.ops)
    if config.replay == "recorded":
        real, ideal = case.occupied_ms(real), case.occupied_ms(ideal)
    # Every group of every dimension is one change of the ideal: one batch replays them all.
    real_runs, ideal_runs = Counterfactuals(case, real), Counterfactuals(case, ideal)
    realized_steps, ideal_steps = real_runs.base_steps, ideal_runs.base_steps
    dimensions = ("attribution_type", "dp_rank", "stage", "rank")
    grouped = [_by(case, column, real) for column in dimensions]
    replayed = ideal_runs.step_times([change for _, changes in grouped for change in changes])
    results, offset = [], 0
    for column, (values, changes) in zip(dimensions, grouped):
        results.append(
            _attributed(case, column, values, replayed[offset : offset + len(changes)], ideal_steps)
        )
        offset += len(changes)
    (by_optype, rows_t), (by_dp_rank, rows_d), (by_stage, rows_s), (by_rank, rows_r) = results
    per_step = pl.DataFrame(
        rows_t + rows_d + rows_s + rows_r,
        schema={"dimension": pl.String(), "group": pl.String(), "step": pl.Int64(), "slowdown": pl.Float64()},
    ).with_columns(pl.col("dimension").replace({"attribution_type": "optype"}))
    last_stage = int(case.ops["stage"].max())  # type: ignore[arg-type]
    last = (case.ops["stage"] == last_stage).to_numpy()
    ms = counterfactual(real_runs, ideal_runs, last, f"stage {last_stage}")
    scores = worker_scores(case, by_dp_rank, by_stage)
    count = math.ceil(len(scores) * config.worker_fraction - 1e-9)
    worst = sorted(scores, key=lambda rank: (-scores[rank], rank))[:count]
    chosen = case.ops["rank"].is_in(worst).to_numpy()
    mw = counterfactual(real_runs, ideal_runs, chosen, "ranks " + ", ".join(str(rank) for rank in worst))
    return WhatIf(
        steps=case.steps,
        replay=config.replay,
        measured_ms=case.measured_ms(),
        realized_ms=realized_steps,
        ideal_ms=ideal_steps,
        by_optype=by_optype,
        by_dp_rank=by_dp_rank,
        by_stage=by_stage,
        by_rank=by_rank,
        per_step=per_step,
        ms=ms,
        mw=mw,
        worker_scores=scores,
    )
