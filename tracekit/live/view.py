"""The live terminal view: per-rank step time, bubble, the current stragglers with their price.

Pure rendering: each function takes what the aggregator computed and returns a rich renderable or
one line of text; the aggregator decides where and when to print.

Not for computing anything (``tracekit.live.assess``, ``tracekit.live.tracker``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracekit.live.assess import IntervalAssessment


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def interval_view(
    assessment: IntervalAssessment, alerts: Sequence[dict[str, Any]], lost: Sequence[int]
) -> Group:
    """The per-rank table of one interval, then its stragglers."""
    steps = assessment.steps
    title = (
        f"tracekit live · interval {assessment.index} · steps {steps[0]}-{steps[-1]} "
        f"({len(steps)} judged) · step {assessment.step_ms:.1f} ms"
    )
    table = Table(title=title, title_justify="left")
    for name in ("rank", "step ms", "bubble", "comm ms", "score", "saving ms", "dropped", "state"):
        table.add_column(name, justify="right" if name not in ("state",) else "left")
    flagged: dict[int, list[str]] = {}
    for alert in alerts:
        flagged.setdefault(alert["rank"], []).append(alert["kind"] + ("!" if alert["persistent"] else "?"))
    for row in assessment.ranks.iter_rows(named=True):
        kinds = flagged.get(row["rank"])
        state = "lost" if row["rank"] in lost else ""
        if kinds is not None:
            state = "slow " + ",".join(sorted(kinds))
        table.add_row(
            str(row["rank"]),
            _ms(row["step_ms"]),
            f"{row['bubble_fraction']:.0%}",
            _ms(row["comm_ms"]),
            "-" if row["score"] is None else f"{row['score']:.2f}",
            _ms(row["saving_ms"]),
            str(row["dropped"]),
            state,
            style="bold red" if kinds is not None else None,
        )
    lines = [alert_line(alert) for alert in alerts] or ["no straggler"]
    if alerts:
        lines.append("state: slow KIND! persistent, slow KIND? transient")
    return Group(table, *(Text(line) for line in lines))


def alert_line(alert: dict[str, Any]) -> str:
    """One plain sentence for an alert."""
    stage = alert["stage"]
    where = f"stage {stage}" if isinstance(stage, int) else "stages " + ",".join(map(str, stage))
    return (
        f"ALERT step {alert['step']}: rank {alert['rank']} runs {alert['kind']} ({where}) "
        f"{alert['slower_pct']:.0f}% slower than its reference; at reference speed the step would take "
        f"{alert['step_ms'] - alert['saving_ms']:.0f} ms instead of {alert['step_ms']:.0f} ms "
        f"(saving {alert['saving_ms']:.0f} ms, {'persistent' if alert['persistent'] else 'transient'})"
    )


def event_line(record: dict[str, Any]) -> str:
    """One line for a non-interval event of live.jsonl (rank lost, capture asked for, skipped interval)."""
    kind = record["type"]
    if kind == "rank_lost":
        return f"RANK LOST: rank {record['rank']} after step {record['last_step']} ({record['reason']})"
    if kind == "capture":
        return (
            f"CAPTURE: steps {record['first_step']}-{record['first_step'] + record['steps'] - 1} of every rank "
            f"into {record['dir']} (straggler rank {record['rank']} {record['kind']})"
        )
    if kind == "interval":
        return f"interval {record['interval']} not judged: {record['skipped']}"
    return str(record)
