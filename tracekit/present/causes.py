"""Why each straggler is slow, as ``tracekit stragglers`` shows it: the ``causes`` JSON list, a table, sentences.

Not for: finding causes (``tracekit.stragglers.causes``) or printing (``tracekit.cli.output``).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.present.result import Table
from tracekit.run_analysis import RunAnalysis
from tracekit.stragglers.causes import CAUSES
from tracekit.stragglers.own_clock import JUDGED_CLOCK

CAUSE_COLUMNS = ("rank", "link", "order", "cause", "share", "price_ms", "upstream", "evidence")
"""The cause table's columns a person reads in the terminal."""


def causes_json(analysis: RunAnalysis) -> list[dict[str, Any]]:
    """The ``causes`` list of the JSON payload (``CAUSE_SCHEMA`` rows, docs/stragglers.md "Why")."""
    return analysis.causes.to_dicts()


def absent_causes_json(analysis: RunAnalysis) -> list[str]:
    """The ``absent_causes`` list of the JSON payload: each GPU cause the run could not compute, and why."""
    return list(analysis.absent_causes)


def describe_cause(row: dict[str, Any]) -> str:
    """One sentence for a cause row: whose, which, how much of its price, and the numbers."""
    who = f"rank {row['rank']}" if row["subject"] == "rank" else f"the link {row['link']}"
    if row["cause"] == "waits":
        return f"{who} waits on {row['upstream']}: {row['evidence']}"
    return f"{who}: {row['cause']} explains {row['share']:.0%} of its price ({row['price_ms']:.1f} ms): {row['evidence']}"


def causes_notes(analysis: RunAnalysis) -> tuple[str, ...]:
    """Sentences for the straggler causes (first causes of each subject), then the clock and probe notes."""
    frame = analysis.causes
    lines = [describe_cause(row) for row in frame.filter(pl.col("cause") != "waits").to_dicts()]
    lines += list(analysis.absent_causes)
    if analysis.own_clock is not None:
        lines.append(f"judged on the {JUDGED_CLOCK}")
    if analysis.probes is not None:
        lines += list(analysis.probes.notes)
    return tuple(lines)


def causes_table(analysis: RunAnalysis) -> Table:
    """Every cause, with the definitions of those present as notes."""
    frame = analysis.causes
    present = dict.fromkeys(frame["cause"].to_list())
    return Table(
        title="why: the causes of each straggler and slow link, and who waits on them",
        frame=frame.select(CAUSE_COLUMNS),
        notes=tuple(f"{cause}: {CAUSES[cause]}" for cause in present),
        name="causes",
    )
