"""``tracekit whatif``'s output: the JSON payload, tables and plain sentences.

Two references are named apart: the *ideal* (this run's own order at ideal durations,
``tracekit.analysis.ideal``) and *this schedule at ideal costs* (the simulator's named schedule
at the same durations); the findings explain the gap between them (``tracekit.whatif.named``).

Not for: computing anything (``tracekit.whatif``) or printing (``tracekit.cli.output``).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.analysis.ideal import IDEAL_DEFINITION, PAPER_REPLAY, Ideal
from tracekit.errors import TracekitError
from tracekit.present.result import Result, Table
from tracekit.present.stragglers import case_warnings, clock_fields
from tracekit.run_analysis import RunAnalysis
from tracekit.whatif.attribution import Counterfactual, WhatIf
from tracekit.whatif.named import NamedComparison

DEFINITIONS: dict[str, str] = {
    "realized": "replay of the recorded dependency graph with every op's own duration, each starting its "
    "recorded gap after what it waits for: the measured step (--replay durations: durations alone)",
    "ideal": IDEAL_DEFINITION,
    "slowdown S": "mean realized / mean ideal step time",
    "by_X": "S with only group X's real durations restored, the rest ideal (can exceed S)",
    "dp_rank": "the data-parallel replica: an op-table's dp_rank; on a captured run, the index of the rank's "
    "pipeline group (run.json or --pipelines)",
    "last-stage share (M_S)": "share of realized - ideal removed by ideal durations on the last stage",
    "worst-worker share (M_W)": "share of realized - ideal removed by ideal durations on the ceil(3%) workers "
    "with the highest min(S_dp, S_stage)",
    "this schedule at ideal costs": "the simulator's step time for the schedule the run names, every action at "
    "its ideal duration, no communication: the second reference; its gap to the ideal is the run's own order",
}


def _counterfactual_json(item: Counterfactual) -> dict[str, Any]:
    return {
        "group": item.group,
        "realized_ms": item.realized_ms,
        "ideal_ms": item.ideal_ms,
        "removed_ms": item.removed_ms,
        "added_ms": item.added_ms,
        "removed_share": item.removed_share,
        "added_share": item.added_share,
    }


def step_table(result: WhatIf) -> pl.DataFrame:
    """One row per step: measured, realized and ideal step time (ms) and the step's slowdown."""
    return pl.DataFrame(
        {
            "step": list(result.steps),
            "measured_ms": result.measured_ms,
            "realized_ms": result.realized_ms,
            "ideal_ms": result.ideal_ms,
        },
        schema={
            "step": pl.Int64(),
            "measured_ms": pl.Float64(),
            "realized_ms": pl.Float64(),
            "ideal_ms": pl.Float64(),
        },
    ).with_columns((pl.col("realized_ms") / pl.col("ideal_ms")).alias("slowdown"))


def attribution_table(result: WhatIf, stage_ranks: dict[str, list[int]] | None = None) -> pl.DataFrame:
    """dimension, group, on_ranks (the ranks a stage runs on), slowdown: every attribution, each dimension worst first."""
    stage_ranks = stage_ranks or {}

    def on(dimension: str, group: object) -> str | None:
        ranks = stage_ranks.get(str(group)) if dimension == "stage" else None
        return ", ".join(str(rank) for rank in ranks) if ranks else None

    rows = [
        (dimension, str(group), on(dimension, group), value)
        for dimension, values in (
            ("optype", result.by_optype),
            ("dp_rank", result.by_dp_rank),
            ("stage", result.by_stage),
            ("rank", result.by_rank),
        )
        for group, value in values.items()
    ]
    return pl.DataFrame(
        rows,
        schema={"dimension": pl.String(), "group": pl.String(), "on_ranks": pl.String(), "slowdown": pl.Float64()},
        orient="row",
    )


def _stage_ranks(analysis: RunAnalysis) -> dict[str, list[int]]:
    """Each stage (as a string) and the ranks that run it, so a stage is named with its rank."""
    pairs = analysis.case.ops.select("stage", "rank").unique().sort("stage", "rank")
    out: dict[str, list[int]] = {}
    for stage, rank in pairs.iter_rows():
        out.setdefault(str(stage), []).append(rank)
    return out


def _on_ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def _group_words(group: str, stage_ranks: dict[str, list[int]]) -> str:
    """``stage 7`` as ``stage 7 (on rank 0)``; ``ranks 2`` as ``rank 2``."""
    kind, _, members = group.partition(" ")
    if kind == "stage" and members in stage_ranks:
        return f"stage {members} (on {_on_ranks(stage_ranks[members])})"
    if kind == "ranks" and "," not in members:
        return f"rank {members}"
    return group


def headline(result: WhatIf, analysis: RunAnalysis, source: str) -> tuple[str, ...]:
    """The answer before the table: the measured step against the ideal, and who costs the most."""
    measured, realized, ideal = result.measured_ms.mean(), result.realized_ms.mean(), result.ideal_ms.mean()
    if abs(measured - realized) < 0.5:
        first = (
            f"The measured step is {measured:.0f} ms; with every op at its ideal duration it would take "
            f"{ideal:.0f} ms: {result.slowdown:.2f}x as long as the ideal (slowdown S)."
        )
    else:
        first = (
            f"The measured step is {measured:.0f} ms; replaying its ops with their own durations gives "
            f"{realized:.0f} ms and with ideal durations {ideal:.0f} ms: {result.slowdown:.2f}x (slowdown S)."
        )
    rank, value = next(iter(result.by_rank.items()))
    second = (
        f"Rank {rank} costs the most: with only its own durations and the rest ideal the replay takes "
        f"{value * ideal:.0f} ms instead of {ideal:.0f} ms"
    )
    if not analysis.is_optable:
        second += f"; `tracekit stragglers {source}` prices it against the measured step"
    return (first, second + ".")


def findings(result: WhatIf, named: NamedComparison | None, stage_ranks: dict[str, list[int]] | None = None) -> list[str]:
    """Plain sentences: each dimension's worst group, the last-stage and worst-worker shares, the named schedule."""
    stage_ranks = stage_ranks or {}
    ideal = result.ideal_ms.mean()
    out = []
    dimensions = [("op type", result.by_optype), ("stage", result.by_stage), ("rank", result.by_rank)]
    if len(result.by_dp_rank) > 1:
        dimensions.insert(1, ("data-parallel replica (dp_rank)", result.by_dp_rank))
    for dimension, values in dimensions:
        group, value = next(iter(values.items()))
        named_group = _group_words(f"stage {group}", stage_ranks) if dimension == "stage" else str(group)
        out.append(
            f"worst {dimension}: {named_group}; with only its own durations the replay would take "
            f"{value * ideal:.0f} ms instead of {ideal:.0f} ms (S = {value:.2f})"
        )
    for name, item in (("last-stage share (M_S)", result.ms), ("worst-worker share (M_W)", result.mw)):
        saved = item.realized_ms - item.removed_ms
        out.append(
            f"{name} {item.removed_share:.0%}: {_group_words(item.group, stage_ranks)} at ideal durations "
            f"saves {saved:.0f} ms of the replay's {item.realized_ms:.0f} ms"
        )
    if named is not None:
        out.append(
            f"{named.schedule} at ideal costs predicts {named.predicted_ms:.0f} ms, the ideal (this run's own "
            f"order at the same costs) {named.typical_ms:.0f} ms; of the {named.gain_lost_ms:.0f} ms lost, "
            f"stragglers cost {named.stragglers_ms:.0f} ms, exposed communication and the rest "
            f"{named.exposed_comm_and_rest_ms:.0f} ms, and the realized order against the named one "
            f"{named.order_ms:.0f} ms (the gap between the two references)"
        )
    return out


def named_json(named: NamedComparison | None) -> dict[str, Any] | None:
    """The named-schedule comparison's JSON form."""
    if named is None:
        return None
    return {
        "schedule": named.schedule,
        "predicted_ms": named.predicted_ms,
        "ideal_ms": named.ideal_ms,
        "own_order_ms": named.typical_ms,
        "measured_ms": named.measured_ms,
        "gain_lost_ms": named.gain_lost_ms,
        "stragglers_ms": named.stragglers_ms,
        "exposed_comm_and_rest_ms": named.exposed_comm_and_rest_ms,
        "order_ms": named.order_ms,
    }


def ideal_table(ideal: Ideal) -> pl.DataFrame:
    """The ideal duration per (rank, stage, op type, work) and where it came from."""
    return ideal.table


def definitions(analysis: RunAnalysis) -> dict[str, str]:
    """``DEFINITIONS`` with the ideal this run used (``Ideal.definition``) and the replay it ran."""
    ideal = analysis.ideal.definition
    if analysis.whatif.replay == "durations":
        ideal = f"{ideal}; {PAPER_REPLAY}"
    return {**DEFINITIONS, "ideal": ideal}


def rank_savings(analysis: RunAnalysis) -> list[dict[str, Any]] | None:
    """Each judged rank's price (``tracekit stragglers``): the measured step saved at its ideal speed."""
    try:
        ranks = analysis.stragglers.ranks
    except TracekitError:
        return None
    return ranks.select("rank", "saving_ms", "step_ms", "step_ms_without", "flagged").to_dicts()


def whatif_payload(analysis: RunAnalysis) -> dict[str, Any]:
    """The stable JSON payload of ``tracekit whatif`` (times in ms)."""
    result, named = analysis.whatif, analysis.named

    def keyed(values: dict) -> dict[str, float]:
        return {str(key): value for key, value in values.items()}

    return {
        "source": analysis.case.source,
        "time_unit": "ms",
        "ideal_method": analysis.ideal.method,
        "replay": result.replay,
        "slowdown": result.slowdown,
        "ideal_step_time": float(result.ideal_ms.mean()),
        "realized_step_time": float(result.realized_ms.mean()),
        "measured_step_time": float(result.measured_ms.mean()),
        "launch_slowdown": result.launch_slowdown,
        "replicas": len(result.by_dp_rank),
        "by_optype": keyed(result.by_optype),
        "by_dp_rank": keyed(result.by_dp_rank),
        "by_stage": keyed(result.by_stage),
        "by_rank": keyed(result.by_rank),
        "ms": result.ms.removed_share,
        "mw": result.mw.removed_share,
        "ms_detail": _counterfactual_json(result.ms),
        "mw_detail": _counterfactual_json(result.mw),
        "steps": step_table(result).to_dicts(),
        "rank_savings": rank_savings(analysis),
        "named_schedule": named_json(named),
        **clock_fields(analysis),
        "findings": findings(result, named, _stage_ranks(analysis)),
        "definitions": definitions(analysis),
    }


def whatif_result(analysis: RunAnalysis, name: str) -> Result:
    """Payload and tables of ``tracekit whatif`` for the input called ``name``."""
    payload = whatif_payload(analysis)
    result = analysis.whatif
    tables = [
        Table(
            title=f"{name}: slowdown (S) with only each group's own durations, the rest ideal",
            frame=attribution_table(result, _stage_ranks(analysis)),
            notes=tuple(payload["findings"]),
            name="attribution",
            headers={"slowdown": "S", "on_ranks": "on rank"},
        ),
        Table(title="steps (ms)", frame=step_table(result), name="steps", shown=False),
        Table(title="per-step attribution", frame=result.per_step, name="per_step", shown=False),
        Table(title="ideal durations", frame=ideal_table(analysis.ideal), name="ideal", shown=False),
    ]
    if not analysis.is_optable and analysis.realized.alignment is not None:
        tables.append(
            Table(title="clock offsets", frame=analysis.realized.alignment.offsets, name="clock", shown=False)
        )
    payload["headline"] = list(headline(result, analysis, name))
    return Result(
        payload=payload,
        tables=tuple(tables),
        warnings=case_warnings(analysis) + analysis.named_warnings,
        headline=tuple(payload["headline"]),
        definitions=tuple(f"{k}: {v}" for k, v in DEFINITIONS.items()),
    )
