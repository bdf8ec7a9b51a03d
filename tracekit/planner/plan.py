"""Simulate every candidate, check its memory, rank them, and say why the first one wins.

Ranking: candidates whose fullest rank fits in GPU memory, by simulated step time (the pipeline's
makespan; data-parallel gradient traffic is assumed overlapped and left out). Candidates within
``TIE`` of the fastest count as tied and the tie goes to fewer parameter copies, then to more
memory headroom. GPU-hours per million tokens = GPUs x step time / 3600 / (tokens per step /
10^6); "lost" is the share of that spent not computing (bubbles and exposed all-to-all).

Not for: the reasons, assumptions and report in words (``tracekit.present.plan``, ``plan_markdown``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.planner.candidates import Candidate, Rejection, enumerate_candidates
from tracekit.planner.costs import (
    UNSCALED,
    CostScale,
    Layout,
    engine_costs,
    layout,
    pair_compute_ms,
    stage_positions,
)
from tracekit.planner.memory import MEMORY_SCHEMA, SecondCopy, rank_memory, second_copy
from tracekit.planner.spec import DUALPIPE_FAMILY, PlanSpec
from tracekit.schedule.action import Kind, OverlappedPair
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.model import Schedule

TIE = 0.01
"""Step times within 1% of the fastest are a tie, broken by memory."""

ALTERNATIVES_SCHEMA: dict[str, pl.DataType] = {
    "schedule": pl.String(),
    "pp": pl.Int32(),
    "microbatches": pl.Int32(),
    "param_copies": pl.Int32(),
    "step_ms": pl.Float64(),
    "bubble_fraction": pl.Float64(),
    "exposed_a2a_ms": pl.Float64(),
    "lost_fraction": pl.Float64(),
    "peak_activations": pl.Float64(),
    "memory_gib": pl.Float64(),
    "headroom_gib": pl.Float64(),
    "gpu_hours_per_mtok": pl.Float64(),
    "extra_gpu_hours_per_mtok": pl.Float64(),
    "fits": pl.Boolean(),
    "simulated_at": pl.String(),
    "note": pl.String(),
}
"""One row per simulated candidate, the recommendation first, then by step time.

bubble_fraction: mean over ranks of idle / step; exposed_a2a_ms: all-to-all not hidden behind
compute on the rank with the most; lost_fraction: 1 - mean compute / step; memory_gib and
headroom_gib: the fullest rank; extra_gpu_hours_per_mtok: against the recommendation (null when
there is none); simulated_at: the micro-batch counts simulated, two when the figures are
extrapolated from them (``candidates.Candidate``); note: why it does not fit, null when it does.
"""

REJECTED_SCHEMA: dict[str, pl.DataType] = {"schedule": pl.String(), "pp": pl.Int32(), "reason": pl.String()}
"""Candidates ruled out before simulation; schedule "*" means every schedule at that depth."""


@dataclass(frozen=True)
class Plan:
    """A recommendation with its reasons, the simulated alternatives and what was ruled out."""

    spec: PlanSpec
    recommendation: dict[str, Any] | None
    """The winning row of ``alternatives``; None when nothing fits."""
    alternatives: pl.DataFrame
    """ALTERNATIVES_SCHEMA."""
    rejected: pl.DataFrame
    """REJECTED_SCHEMA."""
    memory: pl.DataFrame
    """Per-rank memory of the recommendation (``memory.MEMORY_SCHEMA``); empty when there is none."""
    second_copy: SecondCopy
    """What DualPipe's second parameter copy costs at the plan's depth."""
    compute_to_a2a: float | None
    """Forward compute : forward all-to-all of the model's layers (None for a dense model)."""
    rejections: tuple[Rejection, ...]
    """The rows of ``rejected``, as the candidate enumeration gave them."""
    pp: int
    """The depth the figures are stated at: the recommendation's, else the best simulated or asked-for one."""
    extrapolated: bool
    """True when some candidates' figures are extrapolated in M from two smaller simulations."""
    calibration_notes: tuple[str, ...] = ()
    """What the calibration run's costs changed and warned of (``tracekit.planner.calibrate``)."""


@dataclass(frozen=True)
class _Evaluated:
    candidate: Candidate
    row: dict[str, Any]
    memory: pl.DataFrame


def _exposed_a2a(schedule: Schedule, cut: Layout, scale: CostScale) -> list[float]:
    """Per rank, milliseconds of all-to-all its steps run without compute to hide behind."""
    times = [cut.times[position] for position in stage_positions(schedule)]
    factor = {
        Kind.FORWARD: scale.forward,
        Kind.BACKWARD_INPUT: scale.backward_input,
        Kind.FULL_BACKWARD: scale.full_backward,
        Kind.BACKWARD_WEIGHT: 0.0,
    }
    exposed = []
    for steps in schedule.steps:
        total = 0.0
        for step in steps:
            if isinstance(step, OverlappedPair):
                forward, backward = times[step.forward.stage], times[step.backward.stage]
                hidden_behind = pair_compute_ms(forward, backward)
                total += scale.overlapped * max(0.0, forward.a2a + backward.a2a - hidden_behind)
            else:
                total += factor[step.kind] * times[step.stage].a2a
        exposed.append(total)
    return exposed


@dataclass(frozen=True)
class _Measured:
    """A simulated schedule's figures: step, and per rank busy, exposed all-to-all and peak in flight."""

    makespan: float
    busy: list[float]
    exposed: list[float]
    peaks: list[float]


def _measure(spec: PlanSpec, schedule: Schedule, cut: Layout, scale: CostScale) -> _Measured:
    summary = summarize(simulate(schedule, engine_costs(spec, schedule, cut, scale)))
    ranks = summary.ranks
    return _Measured(
        summary.makespan,
        ranks["busy"].to_list(),
        _exposed_a2a(schedule, cut, scale),
        ranks["peak_activations"].to_list(),
    )


def _extrapolate(small: _Measured, large: _Measured, m_small: int, m_large: int, m: int) -> _Measured:
    """Figures at ``m`` micro-batches from two steady-state samples, linear in M; peaks from the larger."""
    t = (m - m_large) / (m_large - m_small)

    def line(a: float, b: float) -> float:
        return b + t * (b - a)

    return _Measured(
        line(small.makespan, large.makespan),
        [line(a, b) for a, b in zip(small.busy, large.busy)],
        [line(a, b) for a, b in zip(small.exposed, large.exposed)],
        large.peaks,
    )


def _evaluate(spec: PlanSpec, candidate: Candidate, cut: Layout, scale: CostScale) -> _Evaluated:
    measured = [_measure(spec, schedule, cut, scale) for schedule in candidate.schedules]
    if candidate.extrapolated:
        small, large = candidate.schedules
        figures = _extrapolate(
            *measured, small.num_microbatches, large.num_microbatches, candidate.microbatches
        )
    else:
        figures = measured[0]
    schedule = candidate.schedules[-1]
    memory = rank_memory(spec, schedule, cut, figures.peaks)
    fullest = memory.row(int(memory["total_gib"].arg_max()), named=True)  # type: ignore[arg-type]
    step = figures.makespan
    gpu_hours = spec.cluster.gpus * step / 1e3 / 3600 / (spec.training.tokens_per_step / 1e6)
    fits = fullest["headroom_gib"] >= 0
    note = None
    if not fits:
        note = (
            f"needs {fullest['total_gib']:.1f} of {spec.cluster.gpu_memory_gib:g} GiB on rank {fullest['rank']} "
            f"(params {fullest['params_gib']:.1f}, grads {fullest['grads_gib']:.1f}, optimizer "
            f"{fullest['optimizer_gib']:.1f}, activations {fullest['activations_gib']:.1f}, reserved "
            f"{fullest['reserved_gib']:.1f})"
        )
    compute = [busy - exposed for busy, exposed in zip(figures.busy, figures.exposed)]
    row = {
        "schedule": candidate.name,
        "pp": candidate.pp,
        "microbatches": candidate.microbatches,
        "param_copies": schedule.param_copies,
        "step_ms": step,
        "bubble_fraction": sum(1.0 - busy / step for busy in figures.busy) / len(figures.busy),
        "exposed_a2a_ms": max(figures.exposed),
        "lost_fraction": 1.0 - sum(compute) / len(compute) / step,
        "peak_activations": max(figures.peaks),
        "memory_gib": fullest["total_gib"],
        "headroom_gib": fullest["headroom_gib"],
        "gpu_hours_per_mtok": gpu_hours,
        "extra_gpu_hours_per_mtok": None,
        "fits": fits,
        "simulated_at": ",".join(str(s.num_microbatches) for s in candidate.schedules),
        "note": note,
    }
    return _Evaluated(candidate, row, memory)


def rank_order(rows: list[dict[str, Any]]) -> list[int]:
    """Indices of ``rows`` (ALTERNATIVES_SCHEMA dicts) best first: fitting by step time, ties within TIE
    to fewer parameter copies then more headroom, then the rows that do not fit by step time."""
    fitting = sorted((i for i, row in enumerate(rows) if row["fits"]), key=lambda i: rows[i]["step_ms"])
    others = sorted((i for i, row in enumerate(rows) if not row["fits"]), key=lambda i: rows[i]["step_ms"])
    if fitting:
        fastest = rows[fitting[0]]["step_ms"]
        tied = [i for i in fitting if rows[i]["step_ms"] <= fastest * (1 + TIE)]
        winner = min(
            tied, key=lambda i: (rows[i]["param_copies"], -rows[i]["headroom_gib"], rows[i]["step_ms"])
        )
        fitting.remove(winner)
        fitting.insert(0, winner)
    return fitting + others


def compute_to_a2a(cut: Layout) -> float | None:
    """Forward compute : forward all-to-all over the model's layer groups; None without all-to-all."""
    a2a = sum(t.a2a for t in cut.times)
    return sum(t.forward for t in cut.times) / a2a if a2a > 0 else None


def plan(spec: PlanSpec, scale: CostScale = UNSCALED, calibration_notes: tuple[str, ...] = ()) -> Plan:
    """Simulate, check and rank every candidate of ``spec``; the first feasible one is recommended."""
    candidates, rejections = enumerate_candidates(spec)
    layouts: dict[tuple[int, bool], Layout] = {}
    evaluated = []
    for candidate in candidates:
        key = (candidate.path_stages, candidate.name in DUALPIPE_FAMILY)
        if key not in layouts:
            layouts[key] = layout(spec, *key)
        cut = layouts[key]
        evaluated.append(_evaluate(spec, candidate, cut, scale))
    ranked = [evaluated[i] for i in rank_order([e.row for e in evaluated])]
    winner = ranked[0] if ranked and ranked[0].row["fits"] else None
    rows = [dict(e.row) for e in ranked]
    if winner is not None:
        for row in rows:
            row["extra_gpu_hours_per_mtok"] = row["gpu_hours_per_mtok"] - winner.row["gpu_hours_per_mtok"]
    alternatives = (
        pl.DataFrame(rows, schema=ALTERNATIVES_SCHEMA) if rows else pl.DataFrame(schema=ALTERNATIVES_SCHEMA)
    )
    rejected = pl.DataFrame(
        {
            "schedule": [r.schedule for r in rejections],
            "pp": [r.pp for r in rejections],
            "reason": [r.reason for r in rejections],
        },
        schema=REJECTED_SCHEMA,
    )
    # the second copy's cost is stated at the recommended depth, else the best simulated or asked-for one
    plan_pp = ranked[0].candidate.pp if ranked else (spec.training.pp or 1)
    copy = second_copy(spec, plan_pp)
    ratio = compute_to_a2a(layout(spec, 1))
    return Plan(
        spec=spec,
        recommendation=dict(alternatives.row(0, named=True)) if winner is not None else None,
        alternatives=alternatives,
        rejected=rejected,
        memory=winner.memory if winner is not None else pl.DataFrame(schema=MEMORY_SCHEMA),
        second_copy=copy,
        compute_to_a2a=ratio,
        rejections=tuple(rejections),
        pp=plan_pp,
        extrapolated=any(candidate.extrapolated for candidate in candidates),
        calibration_notes=calibration_notes,
    )
