"""What-if results shaped for people and scripts: the JSON payload, tables and plain sentences.

Not for: computing anything (``attribution``, ``named``) or printing (``tracekit.cli.output``).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.whatif.attribution import Counterfactual, WhatIf
from tracekit.whatif.clock import ClockAlignment
from tracekit.whatif.named import NamedComparison

DEFINITIONS: dict[str, str] = {
    "realized": "replay of the dependency graph with every op's own duration, no launch gaps",
    "ideal": "the same replay with each op type at its typical duration (compute: mean, communication: median)",
    "slowdown S": "mean realized / mean ideal step time",
    "by_X": "S with only group X's real durations restored, the rest typical (can exceed S)",
    "M_S": "share of realized - ideal removed by typical durations on the last stage",
    "M_W": "share removed by typical durations on the ceil(3%) workers with the highest min(S_dp, S_stage)",
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
    for dimension, values in (
        ("op type", result.by_optype),
        ("stage", result.by_stage),
        ("rank", result.by_rank),
    ):
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
            f"{named.schedule} predicts {named.predicted_ms:.0f} ms with this run's median costs; of the "
            f"{named.gain_lost_ms:.0f} ms lost, stragglers cost {named.stragglers_ms:.0f} ms, exposed "
            f"communication and the rest {named.exposed_comm_and_rest_ms:.0f} ms, the realized order "
            f"{named.order_ms:.0f} ms"
        )
    return out


def clock_json(clock: ClockAlignment | None) -> dict[str, Any] | None:
    """Offsets per host and the violations left, or None for inputs without clocks to align."""
    if clock is None:
        return None
    return {
        "offsets": clock.offsets.to_dicts(),
        "dependencies": clock.dependencies,
        "violations": clock.violations,
        "worst_violation_ns": clock.worst_violation_ns,
        "unresolved_hosts": list(clock.unresolved_hosts),
    }


def whatif_payload(
    result: WhatIf, source: str, clock: ClockAlignment | None, named: NamedComparison | None
) -> dict[str, Any]:
    """The stable JSON payload of ``tracekit whatif`` (times in ms)."""

    def keyed(values: dict) -> dict[str, float]:
        return {str(key): value for key, value in values.items()}

    return {
        "source": source,
        "time_unit": "ms",
        "slowdown": result.slowdown,
        "ideal_step_time": float(result.ideal_ms.mean()),
        "realized_step_time": float(result.realized_ms.mean()),
        "measured_step_time": float(result.measured_ms.mean()),
        "launch_slowdown": result.launch_slowdown,
        "by_optype": keyed(result.by_optype),
        "by_dp_rank": keyed(result.by_dp_rank),
        "by_stage": keyed(result.by_stage),
        "by_rank": keyed(result.by_rank),
        "ms": result.ms.removed_share,
        "mw": result.mw.removed_share,
        "ms_detail": _counterfactual_json(result.ms),
        "mw_detail": _counterfactual_json(result.mw),
        "steps": step_table(result).to_dicts(),
        "named_schedule": None if named is None else named.to_json(),
        "clock": clock_json(clock),
        "findings": findings(result, named),
        "definitions": DEFINITIONS,
    }
