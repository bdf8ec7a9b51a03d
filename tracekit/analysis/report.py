"""The per-rank report of a captured run: what ``tracekit report`` prints, as plain data.

``report_of_actions`` turns a realized schedule (CPU or GPU times) into a ``RunReport`` of frames;
``report_payload`` turns that into the stable JSON document scripts consume (docs/report.md). Times
in the payload are milliseconds, schedule times relative to the run's first action.

Not for: deciding what a run supports or the GPU figures (``tracekit.gpu.report``), nor printing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analysis.utilization import rank_utilization, step_utilization
from tracekit.schedule.action import KIND_CODES
from tracekit.trace.run import Run

REPORT_FORMAT_VERSION = 1

DEFINITIONS = {
    "window": "per step, from the earliest action start on any rank to the latest action end on any rank "
    "(covers pipeline fill and drain); a rank's window is the sum over its steps",
    "busy": "union of the rank's compute-action spans (F, B, I, W) inside the window",
    "bubble_fraction": "(window - busy) / window",
}

_NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class RunReport:
    """Everything ``tracekit report`` shows about one run."""

    run: Run
    actions: pl.DataFrame
    """Realized schedule (``tracekit.analysis.realized.REALIZED_SCHEMA``)."""
    per_step: pl.DataFrame
    """``step_utilization`` of the actions."""
    per_rank: pl.DataFrame
    """``rank_utilization`` of the actions."""
    warnings: tuple[str, ...]


def report_of_actions(run: Run, actions: pl.DataFrame, warnings: tuple[str, ...]) -> RunReport:
    """Per-step and per-rank utilization of realized ``actions`` (``REALIZED_SCHEMA``) of ``run``."""
    per_step = step_utilization(actions)
    return RunReport(
        run=run, actions=actions, per_step=per_step, per_rank=rank_utilization(per_step), warnings=warnings
    )


def in_ms(columns: list[str], origin: pl.Expr | int | None = 0) -> list[pl.Expr]:
    """Each ``x_ns`` column as ``x`` in milliseconds, counted from ``origin`` (ns)."""
    return [((pl.col(column) - origin) / _NS_PER_MS).alias(column.removesuffix("_ns")) for column in columns]


def run_summary(run: Run) -> dict[str, Any]:
    """What the run is: its directory, ranks, and the collector's facts when it has a manifest."""
    manifest = run.manifest
    schedule = None if manifest is None else manifest.schedule
    captured = None if manifest is None else manifest.steps.captured
    return {
        "root": str(run.root),
        "world_size": run.world_size,
        "ranks_present": list(run.ranks),
        "missing_ranks": list(run.missing_ranks),
        "partial": run.partial,
        "schedule": None if schedule is None else schedule.name,
        "pp": None if manifest is None else manifest.pp_size,
        "microbatches": None if manifest is None else manifest.microbatches,
        "steps_captured": None if captured is None else list(captured),
        "torch_version": None if manifest is None else manifest.torch_version,
        "hosts": None if manifest is None else list(manifest.hosts),
    }


def rank_table(report: RunReport) -> pl.DataFrame:
    """The per-rank table people read: milliseconds and counts."""
    return report.per_rank.select(
        "rank", "steps", *in_ms(["window_ns", "busy_ns", "bubble_ns"]), "bubble_fraction", *KIND_CODES
    )


def _document_head(run: Run) -> dict[str, Any]:
    return {
        "format_version": REPORT_FORMAT_VERSION,
        "time_unit": "ms",
        "run": run_summary(run),
        "definitions": DEFINITIONS,
    }


def unlabelled_payload(run: Run) -> dict[str, Any]:
    """The document of a run without schedule labels: its facts, empty ranks, steps and schedule, no warnings."""
    return {**_document_head(run), "ranks": [], "steps": [], "schedule": []}


def report_payload(report: RunReport) -> dict[str, Any]:
    """The stable JSON document of a report (docs/report.md)."""
    origin = report.actions["start_ns"].min()
    ranks = [
        {
            "rank": row["rank"],
            "bubble_fraction": row["bubble_fraction"],
            "busy": row["busy"],
            "window": row["window"],
            "bubble": row["bubble"],
            "steps": row["steps"],
            "actions": {code: row[code] for code in KIND_CODES},
        }
        for row in rank_table(report).iter_rows(named=True)
    ]
    steps = report.per_step.select(
        "rank", "step", *in_ms(["window_ns", "busy_ns", "bubble_ns"]), "bubble_fraction"
    ).to_dicts()
    schedule = report.actions.select(
        "rank",
        "stage",
        "kind",
        "microbatch",
        "step",
        *in_ms(["start_ns", "end_ns"], origin),
        "overlapped",
    ).to_dicts()
    return {
        **_document_head(report.run),
        "ranks": ranks,
        "steps": steps,
        "schedule": schedule,
        "warnings": list(report.warnings),
    }
