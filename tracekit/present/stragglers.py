"""``tracekit stragglers``' output: the JSON payload, the heading, the tables and plain sentences.

The notes under the table are built from the ``StragglerConfig`` the scores were made with, so they
always state the thresholds actually used.

Not for: scoring (``tracekit.stragglers``) or printing (``tracekit.cli.output``).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.present.causes import absent_causes_json, causes_json, causes_notes, causes_table
from tracekit.present.common import clock_json
from tracekit.present.result import Result, Table
from tracekit.run_analysis import RunAnalysis
from tracekit.stragglers.scoring import StragglerConfig, Stragglers

_AGAINST = {"peers": "its peers", "expected": "its expected cost", "history": "its other steps"}
_AT = {"peers": "peer speed", "expected": "expected speed", "history": "its usual speed"}


def notes(config: StragglerConfig) -> tuple[str, ...]:
    """The definitions printed under the tables, from the config's thresholds."""
    return (
        "score: reference / own median duration of compute (1 typical; below 1 slower)",
        (
            "reference: peers (the same stage in the other data-parallel replicas, or the same place on the path "
            "with the same work), else "
            "expected (the other stages' cost per parameter times this stage's), else history (its own other steps)"
        ),
        (
            f"straggler: a rank scoring below {config.threshold} on F, F&B or its whole backward (B, I, W), in more "
            f"than {config.persistent_share:.0%} of the steps, whose reference speed saves at least "
            f"{config.min_saving_share:.0%} of the step"
        ),
        "saving_ms: replayed step time saved with only that rank (or that rank's kind) at reference speed",
    )


def heading(source: str, result: Stragglers) -> str:
    """The title above the rank table: how many ranks are stragglers, by the rule that flags them."""
    count = result.flagged.height
    rule = f"score below {result.config.threshold} and costing at least {result.config.min_saving_share:.0%} of the step"
    if count == 0:
        return f"{source}: no straggler ({rule})"
    return f"{source}: {count} straggling rank{'s' if count > 1 else ''} ({rule})"


def _slower(kind_score: float) -> str:
    slower = 1 / kind_score - 1
    return f"{abs(slower):.0%} {'slower' if slower >= 0 else 'faster'}"


def headline(source: str, payload: dict[str, Any]) -> tuple[str, ...]:
    """The answer before the table: the costliest straggler, its saving in ms and in % of the
    measured step, and what to look at next; or that no rank is one."""
    flagged = payload["stragglers"]
    if not flagged:
        ranks = payload["ranks"]
        worst = max(ranks, key=lambda row: row["saving_ms"], default=None)
        if worst is None:
            return (f"No rank could be judged in {source}: see the reasons below.",)
        return (
            f"No straggler in {source}: the costliest rank, rank {worst['rank']}, would save "
            f"{worst['saving_ms']:.1f} ms ({worst['saving_ms'] / worst['step_ms']:.0%} of the "
            f"{worst['step_ms']:.0f} ms step) at {_AT[worst['reference']]}.",
        )
    top = flagged[0]
    which = f" (replica {top['replica']})" if payload["replicas"] > 1 else ""
    others = f" {len(flagged) - 1} more rank{'s' if len(flagged) > 2 else ''} below." if len(flagged) > 1 else ""
    return (
        f"Rank {top['rank']}{which} is the straggler: at {_AT[top['reference']]} the measured "
        f"{top['step_ms']:.0f} ms step would take {top['step_ms_without']:.0f} ms, a saving of "
        f"{top['saving_ms']:.0f} ms ({top['saving_ms'] / top['step_ms']:.0%} of the step).{others}",
        f"Its {top['kind']} work runs {_slower(top['kind_score'])} than {_AGAINST[top['reference']]}; "
        f"see it on the timeline with `tracekit dashboard {source} --out report.html`.",
    )


def describe(row: dict[str, Any], replicas: int = 1) -> str:
    """One plain sentence for a rank row: its slowest kind against its reference, and its price.

    With ``replicas`` > 1 data-parallel replicas the rank's replica is named too.
    """
    slower = 1 / row["kind_score"] - 1
    change = -row["saving_ms"] / row["step_ms"]
    which = f" (replica {row['replica']})" if replicas > 1 else ""
    return (
        f"rank {row['rank']}{which} runs {row['kind']} {abs(slower):.0%} {'slower' if slower >= 0 else 'faster'} than "
        f"{_AGAINST[row['reference']]}; at {_AT[row['reference']]} the step would take "
        f"{row['step_ms_without']:.0f} ms instead of {row['step_ms']:.0f} ms ({change:+.0%})"
    ).replace("(-", "(\u2212")


STRAGGLER_KEYS = ("rank", "replica", "kind", "score", "reference", "saving_ms", "step_ms", "step_ms_without")
"""The documented keys of each ``stragglers`` entry (docs/stragglers.md); ``kind_score``,
``pattern`` and ``summary`` follow them."""


def describe_link(row: dict[str, Any]) -> str:
    """One plain sentence for a slow link: its latency against the others', and its price."""
    change = -row["saving_ms"] / row["step_ms"]
    return (
        f"the link between ranks {row['rank_a']} and {row['rank_b']} exposes {row['latency_ms']:.1f} ms per transfer "
        f"against {row['reference_ms']:.1f} ms on the other links; at their latency the step would take "
        f"{row['step_ms_without']:.0f} ms instead of {row['step_ms']:.0f} ms ({change:+.0%})"
    ).replace("(-", "(\u2212")


def replica_of_ranks(analysis: RunAnalysis) -> pl.DataFrame:
    """rank, replica (Int32): each rank's data-parallel replica, as the replay case knows it (op-tables: dp_rank)."""
    return analysis.case.ops.select("rank", pl.col("dp_rank").alias("replica")).unique("rank").sort("rank")


def with_replica(frame: pl.DataFrame, analysis: RunAnalysis) -> pl.DataFrame:
    """``frame`` (with a ``rank`` column) with each rank's ``replica`` right after ``rank``, rows kept in order."""
    joined = frame.join(replica_of_ranks(analysis), on="rank", how="left", maintain_order="left")
    columns = list(frame.columns)
    at = columns.index("rank") + 1
    return joined.select(*columns[:at], "replica", *columns[at:])


def _replicas(analysis: RunAnalysis) -> int:
    return int(analysis.case.ops["dp_rank"].n_unique())


def stragglers_payload(analysis: RunAnalysis) -> dict[str, Any]:
    """The JSON payload of ``tracekit stragglers``: stragglers most costly first, unjudged ranks, links, every score."""
    result, links = analysis.stragglers, analysis.slow_links
    replicas = _replicas(analysis)
    flagged = [
        {
            **{key: row[key] for key in STRAGGLER_KEYS},
            "kind_score": row["kind_score"],
            "pattern": row["pattern"],
            "summary": describe(row, replicas),
        }
        for row in with_replica(result.flagged, analysis).to_dicts()
    ]
    return {
        "threshold": result.config.threshold,
        "min_saving_share": result.config.min_saving_share,
        "persistent_share": result.config.persistent_share,
        "time_unit": "ms",
        "stragglers": flagged,
        "causes": causes_json(analysis),
        "absent_causes": absent_causes_json(analysis),
        "unjudged": result.unjudged.to_dicts(),
        "links": []
        if links is None
        else [{**row, "summary": describe_link(row)} if row["flagged"] else row for row in links.to_dicts()],
        "replicas": replicas,
        "ranks": with_replica(result.ranks, analysis).to_dicts(),
        "scores": with_replica(result.scores, analysis).to_dicts(),
        **clock_fields(analysis),
        "notes": list(notes(result.config)),
        "definitions": dict(note.split(": ", 1) for note in notes(result.config)),
    }


RANK_COLUMNS = (
    "rank",
    "replica",
    "reference",
    "score",
    "kind",
    "kind_score",
    "pattern",
    "saving_ms",
    "step_ms_without",
    "flagged",
)
"""The rank table's columns (``--wide`` and files)."""

NARROW_COLUMNS = ("rank", "replica", "reference", "kind", "kind_score", "pattern", "saving_ms", "flagged")
"""The rank table's columns a terminal shows by default (100 columns)."""

RANK_HEADERS = {
    "reference": "vs",
    "kind_score": "kind score",
    "saving_ms": "saving ms",
    "step_ms_without": "step ms without",
    "flagged": "flagged",
}


def rank_table(result: Stragglers, analysis: RunAnalysis) -> pl.DataFrame:
    """Every judged rank, stragglers first, with its replica, narrowed to ``RANK_COLUMNS``."""
    return with_replica(result.ranks, analysis).select(RANK_COLUMNS)


def case_warnings(analysis: RunAnalysis) -> tuple[str, ...]:
    """What the replay-based commands (stragglers, what-if) must say, each once, in one order."""
    warnings = list(analysis.run_warnings)
    if not analysis.is_optable:
        warnings += analysis.realized.warnings
    warnings += analysis.replay.warnings
    return tuple(dict.fromkeys(warnings))


def clock_fields(analysis: RunAnalysis) -> dict[str, Any]:
    """``clock`` (gpu or cpu; null for an op-table) and ``clock_alignment`` (per-host offsets)."""
    if analysis.is_optable:
        return {"clock": None, "clock_alignment": None}
    return {"clock": analysis.clock.value, "clock_alignment": clock_json(analysis.realized.alignment)}


def stragglers_result(analysis: RunAnalysis, name: str) -> Result:
    """Payload and tables of ``tracekit stragglers`` for the input called ``name``."""
    result = analysis.stragglers
    payload = stragglers_payload(analysis)
    unjudged = tuple(f"rank {row['rank']} not judged: {row['reason']}" for row in payload["unjudged"])
    narrow = NARROW_COLUMNS if payload["replicas"] > 1 else tuple(c for c in NARROW_COLUMNS if c != "replica")
    tables = (
        Table(
            title=heading(name, result),
            frame=rank_table(result, analysis),
            notes=tuple(row["summary"] for row in payload["stragglers"][1:])
            + tuple(describe_link(row) for row in payload["links"] if row["flagged"])
            + causes_notes(analysis)
            + unjudged,
            name="ranks",
            columns=narrow,
            headers=RANK_HEADERS,
        ),
        causes_table(analysis),
        Table(
            title="scores per rank and kind",
            frame=with_replica(result.scores, analysis),
            name="stragglers",
            shown=False,
        ),
    )
    payload["headline"] = list(headline(name, payload))
    return Result(
        payload=payload,
        tables=tables,
        warnings=case_warnings(analysis),
        headline=tuple(payload["headline"]),
        definitions=notes(result.config),
    )
