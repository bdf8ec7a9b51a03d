"""Straggler results shaped for people and scripts: the JSON payload and the plain sentences.

Not for: scoring (``scoring``) or printing (``tracekit.cli.output``).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.stragglers.scoring import StragglerConfig, describe

NOTES: tuple[str, ...] = (
    "score: peer median / own median of compute durations (1 typical; below 1 slower)",
    "peers: other ranks running the kind on the same work (stage, or first/middle/last stage); 0: not judged",
    "flagged: score below the threshold, persistent, and peer speed would save at least 5% of the step",
    "pattern: persistent when slow in more than half the steps, one-off when in fewer",
    "saving_ms: replayed step time saved with the rank's actions of this kind at peer speed",
)


SHOWN_COLUMNS = ("rank", "kind", "work", "peers", "score", "median_ms", "pattern", "saving_ms", "flagged")
"""The columns a person reads in the terminal; every column goes to --out and JSON."""


def score_table(scores: pl.DataFrame) -> pl.DataFrame:
    """The scores narrowed to ``SHOWN_COLUMNS``."""
    return scores.select(SHOWN_COLUMNS)


def stragglers_payload(
    scores: pl.DataFrame, config: StragglerConfig, clock: dict[str, Any] | None
) -> dict[str, Any]:
    """The JSON payload of ``tracekit stragglers``: flagged rows most harmful first, then every score."""
    flagged = [{**row, "summary": describe(row)} for row in scores.filter(pl.col("flagged")).to_dicts()]
    return {
        "threshold": config.threshold,
        "time_unit": "ms",
        "stragglers": flagged,
        "scores": scores.to_dicts(),
        "clock": clock,
        "notes": list(NOTES),
    }
