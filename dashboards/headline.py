"""The dashboard's opening panel: the answer in two or three sentences, before any chart.

Who straggles, what it costs in ms and in % of the measured step (the price ``tracekit
stragglers`` prints, from the same ``RunAnalysis``), and how the run's step and bubble stand
against its ideal (``tracekit whatif``'s ideal step). Each figure is read from the analysis, never
recomputed here, so the panel agrees with the commands to the digit.

Not for: computing figures (``tracekit.run_analysis``) or drawing charts (the view modules).
"""

from __future__ import annotations

from typing import Any

from tracekit.errors import TracekitError
from tracekit.run_analysis import RunAnalysis

_AGAINST = {"peers": "its peers", "expected": "the expected cost of its work", "history": "its other steps"}
_AT = {"peers": "peer speed", "expected": "expected speed", "history": "its usual speed"}


def straggler_sentence(row: dict[str, Any], others: int) -> str:
    """The costliest straggler, its slowest kind against its reference, and its price."""
    slower = 1 / row["kind_score"] - 1
    more = f" {others} more rank{'s' if others > 1 else ''} straggle{'' if others > 1 else 's'} too." if others else ""
    return (
        f"Rank {row['rank']} is the straggler: its {row['kind']} work runs {abs(slower):.0%} "
        f"{'slower' if slower >= 0 else 'faster'} than {_AGAINST[row['reference']]}. At {_AT[row['reference']]} "
        f"the {row['step_ms']:.0f} ms step would take {row['step_ms_without']:.0f} ms: it costs "
        f"{row['saving_ms']:.0f} ms, {row['saving_ms'] / row['step_ms']:.0%} of the step.{more}"
    )


def _stragglers(analysis: RunAnalysis) -> str | None:
    try:
        flagged = analysis.stragglers.flagged
        threshold = analysis.stragglers.config.threshold
    except TracekitError:
        return None
    if flagged.is_empty():
        return f"No straggler: no rank's compute scores below {threshold} against its reference while costing the step."
    rows = flagged.to_dicts()
    return straggler_sentence(rows[0], len(rows) - 1)


def _bubble(analysis: RunAnalysis) -> str:
    per_rank = analysis.utilization.per_rank
    bubble = float(per_rank["bubble_fraction"].mean())  # type: ignore[arg-type]
    sentence = f"The ranks sit idle (the pipeline bubble) {bubble:.0%} of the step on average"
    try:
        whatif = analysis.whatif
    except TracekitError:
        return sentence + "."
    measured, ideal = float(whatif.measured_ms.mean()), float(whatif.ideal_ms.mean())
    return (
        f"{sentence}; with every action at its ideal duration the {measured:.0f} ms step would take "
        f"{ideal:.0f} ms (the ideal timeline below, on its own time axis)."
    )


def headline(analysis: RunAnalysis) -> tuple[str, ...]:
    """The panel's sentences; empty for a run without schedule labels (its sections say why)."""
    if not analysis.has_schedule_labels:
        return ()
    straggler = _stragglers(analysis)
    return (*([straggler] if straggler else []), _bubble(analysis))
