"""``tracekit whatif``'s output: the JSON payload, tables and plain sentences.

Two references are named apart: the *ideal* (this run's own order at ideal durations,
``tracekit.analysis.ideal``) and *this schedule at typical costs* (the simulator's named schedule
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
    "by_X": "S with only group X's real durations restored, the rest typical (can exceed S)",
    "dp_rank": "the data-parallel replica: an op-table's dp_rank; on a captured run, the index of the rank's "
    "pipeline group (run.json or --pipelines)",
    "M_S": "share of realized - ideal removed by typical durations on the last stage",
    "M_W": "share removed by typical durations on the ceil(3%) workers with the highest min(S_dp, S_stage)",
    "this schedule at typical costs": "the simulator's step time for the schedule the run names, every action at "
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


def attribution_table(result: WhatIf) -> pl.DataFrame:
    """dimension, group, slowdown: every attribution, each dimension worst first."""
    rows = [
        (dimension, str(group), value)
        for dimension, values in (
            ("optype", result.by_optype),
            ("dp_rank", result.by_dp_rank),
            ("stage", result.by_stage),
            ("rank", result.by_rank),
        )
        for group, value in values.items()
    ]
    return pl.DataFrame(
        rows, schema={"dimension": pl.String(), "group": pl.String(), "slowdown": pl.Float64()}, orient="row"
    )


def findings(result: WhatIf, named: NamedComparison | None) -> list[str]:
    """Plain sentences: the slowdown, its main contributors, M_S, M_W and the named-schedule gap."""
    realized, ideal = result.realized_ms.mean(), result.ideal_ms.mean()
    headline = (
        f"S = {result.slowdown:.3f}: the step takes {realized:.0f} ms where typical durations would give "
        f"{ideal:.0f} ms ({realized / ideal - 1:+.0%})"
    )
    out = [headline]
    dimensions = [("op type", result.by_optype), ("stage", result.by_stage), ("rank", result.by_rank)]
    if len(result.by_dp_rank) > 1:
        dimensions.insert(1, ("data-parallel replica (dp_rank)", result.by_dp_rank))
    for dimension, values in dimensions:
        group, value = next(iter(values.items()))
        out.append(
            f"worst {dimension}: {group}; with only its real durations the step would take "
            f"{value * ideal:.0f} ms instead of {ideal:.0f} ms (S = {value:.3f})"
        )
    for name, item in (("M_S", result.ms), ("M_W", result.mw)):
        out.append(
            f"{name} = {item.removed_share:.0%}: typical durations on {item.group} would take the step from "
            f"{item.realized_ms:.0f} ms to {item.removed_ms:.0f} ms"
        )
    if named is not None:
        out.append(
            f"{named.schedule} at typical costs predicts {named.predicted_ms:.0f} ms, this run's own order at the "
            f"same costs {named.typical_ms:.0f} ms; of the {named.gain_lost_ms:.0f} ms lost, "
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
        "findings": findings(result, named),
        "definitions": definitions(analysis),
    }


def whatif_result(analysis: RunAnalysis, name: str) -> Result:
    """Payload and tables of ``tracekit whatif`` for the input called ``name``."""
    payload = whatif_payload(analysis)
    result = analysis.whatif
    tables = [
        Table(
            title=f"{name}: S = {payload['slowdown']:.3f}",
            frame=attribution_table(result),
            notes=tuple(f"{k}: {v}" for k, v in payload["definitions"].items()) + tuple(payload["findings"]),
            name="attribution",
        ),
        Table(title="steps (ms)", frame=step_table(result), name="steps", shown=False),
        Table(title="per-step attribution", frame=result.per_step, name="per_step", shown=False),
        Table(title="ideal durations", frame=ideal_table(analysis.ideal), name="ideal", shown=False),
    ]
    if not analysis.is_optable and analysis.realized.alignment is not None:
        tables.append(
            Table(title="clock offsets", frame=analysis.realized.alignment.offsets, name="clock", shown=False)
        )
    return Result(
        payload=payload, tables=tuple(tables), warnings=case_warnings(analysis) + analysis.named_warnings
    )
