"""``tracekit diff``'s output: a headline sentence first, then the JSON payload, tables and Markdown.

The JSON document (docs/diff.md) holds every frame of the ``RunDiff``; the tables and the Markdown
(for a pull-request comment) show what explains the change, largest saving first, plus the
groups whose own duration changed most even when that costs nothing (a slower W with slack). When
the step-time change stays within the noise band, nothing is ranked: the headline says so.

Not for: computing anything (``tracekit.run_diff``) or printing (``tracekit.cli.output``).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.changes.explain import SAVING_DEFINITION
from tracekit.changes.host import HOST_DEFINITION
from tracekit.changes.steps import NOISE_DEFINITION, RunSteps, regressed
from tracekit.present.result import Result, Table
from tracekit.run_diff import RunDiff

SHOWN_ROWS = 10
"""Rows of the explained table, largest saving first."""

SHOWN_CHANGES = 5
"""Rows added for the largest own-duration changes not among them (changes that cost little)."""

CHANGE_FLOOR_SHARE = 0.02
"""Within noise, a group's or link's own change is shown when at least this share of BASE's median step."""

_EXPLAINED_COLUMNS = ["name", "base_ms", "new_ms", "change_pct", "own_change_ms", "saving_ms", "share"]


def _ms(value: float) -> str:
    return f"{value:,.1f} ms" if abs(value) >= 10 else f"{value:.2f} ms"


def _signed(value: float) -> str:
    return ("+" if value >= 0 else "\u2212") + _ms(abs(value))


def top_row(result: RunDiff) -> dict[str, Any] | None:
    """The row that explains most of the change (largest saving of the change's sign); None within noise."""
    change = result.step_change
    rows = result.explanation.rows
    if not change.beyond_noise or rows.is_empty():
        return None
    ordered = rows.sort("saving_ms", descending=change.change_ms > 0)
    return ordered.row(0, named=True)


def _row_phrase(row: dict[str, Any], change_ms: float) -> str:
    own = f"own duration {_signed(row['own_change_ms'])} per step"
    if row["level"] == "link":
        own = f"exposed latency {row['base_ms']:.2f} \u2192 {row['new_ms']:.2f} ms per transfer"
    elif row["level"] == "group":
        own = f"{row['base_ms']:.2f} \u2192 {row['new_ms']:.2f} ms per op"
    share = f" ({row['saving_ms'] / change_ms:.0%} of it)" if change_ms else ""
    return f"{row['name']} explains {_ms(row['saving_ms'])}{share}: {own}"


def _pct(value: float) -> str:
    return ("+" if value >= 0 else "\u2212") + f"{abs(value):.1f}%"


def headline(result: RunDiff) -> str:
    """One sentence: how NEW's median step changed against BASE's, beyond noise or not, and what explains most."""
    change = result.step_change
    medians = f"median step {_ms(change.base.median_ms)} \u2192 {_ms(change.new.median_ms)}"
    if not change.beyond_noise:
        return (
            f"no change beyond noise: {medians} ({_signed(change.change_ms)}, {_pct(change.change_pct)}; "
            f"noise band \u00b1{_ms(change.noise_ms)})"
        )
    direction = "slower" if change.change_ms > 0 else "faster"
    sentence = (
        f"NEW is {_ms(abs(change.change_ms))} ({abs(change.change_pct):.1f}%) {direction} per step than BASE "
        f"({medians}; noise band \u00b1{_ms(change.noise_ms)})"
    )
    if host_accounts(result):
        return f"{sentence}; {_host_phrase(result)}"
    row = top_row(result)
    return sentence if row is None else f"{sentence}; {_row_phrase(row, change.change_ms)}"


def host_accounts(result: RunDiff) -> bool:
    """True when the step change stands beyond noise only by how long the host kept the ranks off a core."""
    return result.host is not None and result.host.accounts_for(result.step_change)


def _host_phrase(result: RunDiff) -> str:
    host, change = result.host, result.step_change
    assert host is not None
    more = "longer" if host.change_ms > 0 else "less"
    return (
        f"the host's, not the job's: its ranks waited for a CPU core {_ms(abs(host.change_ms))} a step {more} "
        f"({_ms(host.base_ms)} \u2192 {_ms(host.new_ms)}), and the rest, {_signed(change.change_ms - host.change_ms)}, "
        "is within the noise band"
    )


def gate_line(result: RunDiff, fail_over_pct: float) -> tuple[bool, str]:
    """The regression gate: (failed, one line) for ``--fail-over PCT``."""
    change = result.step_change
    slower = regressed(change, fail_over_pct)
    if slower and not host_accounts(result):
        row = top_row(result)
        most = "" if row is None else f"; {_row_phrase(row, change.change_ms)}"
        return True, (
            f"regression: NEW's median step is {change.change_pct:.1f}% slower than BASE's "
            f"(over {fail_over_pct:g}%, beyond the \u00b1{_ms(change.noise_ms)} noise band){most}"
        )
    if not change.beyond_noise:
        why = "within noise"
    elif slower:
        why = f"{_pct(change.change_pct)}, over {fail_over_pct:g}% but {_host_phrase(result)}"
    else:
        why = f"{_pct(change.change_pct)}, not over {fail_over_pct:g}%"
    return False, f"no regression: NEW's median step {_signed(change.change_ms)} against BASE's ({why})"


def shown_rows(result: RunDiff) -> pl.DataFrame:
    """The explained rows a person reads: the largest savings, then the largest own changes not among them.

    Within noise nothing is ranked by saving: only groups and links whose own duration changed by at
    least ``CHANGE_FLOOR_SHARE`` of BASE's median step, largest change first.
    """
    rows = result.explanation.rows.with_row_index("_order")
    if not result.step_change.beyond_noise:
        floor = CHANGE_FLOOR_SHARE * result.step_change.base.median_ms
        return (
            rows.filter((pl.col("level") != "rank") & (pl.col("own_change_ms").abs() >= floor))
            .sort(pl.col("own_change_ms").abs(), descending=True)
            .head(SHOWN_CHANGES)
            .drop("_order")
        )
    top = rows.head(SHOWN_ROWS)
    changed = (
        rows.join(top.select("_order"), on="_order", how="anti")
        .filter(pl.col("level") != "rank")
        .sort(pl.col("own_change_ms").abs(), descending=True)
        .head(SHOWN_CHANGES)
    )
    return pl.concat([top, changed]).sort("_order").drop("_order")


def _steps_json(source: str, steps: RunSteps) -> dict[str, Any]:
    return {"source": source, "steps": steps.steps, "median_ms": steps.median_ms, "spread_ms": steps.spread_ms,
            "min_ms": steps.min_ms, "max_ms": steps.max_ms}  # fmt: skip


def definitions(result: RunDiff) -> dict[str, str]:
    """The definitions every output quotes, with the noise settings used."""
    noise = result.config.noise
    return {
        "noise": f"{NOISE_DEFINITION} (confidence {noise.confidence:g}, noise_floor_share {noise.noise_floor_share:g})",
        "saving": SAVING_DEFINITION,
        "own_change_ms": "per step, the time NEW's ops of the group spend beyond BASE's speed",
        "host": HOST_DEFINITION,
    }


def diff_payload(result: RunDiff, fail_over_pct: float | None = None) -> dict[str, Any]:
    """The JSON document of docs/diff.md."""
    change = result.step_change
    explanation = result.explanation
    payload: dict[str, Any] = {
        "headline": headline(result),
        "base": _steps_json(str(result.base.source), change.base),
        "new": _steps_json(str(result.new.source), change.new),
        "change": {
            "median_ms": change.change_ms,
            "pct": change.change_pct,
            "noise_ms": change.noise_ms,
            "beyond_noise": change.beyond_noise,
            "mean_ms": explanation.mean_change_ms,
        },
        "host": None
        if result.host is None
        else {
            "base_wait_ms": result.host.base_ms,
            "new_wait_ms": result.host.new_ms,
            "change_ms": result.host.change_ms,
            "accounts_for_change": host_accounts(result),
        },
        "comparison": {
            "key": list(result.comparability.key),
            "differences": list(result.comparability.differences),
        },
        "totals": {
            "all_ms": explanation.all_saving_ms,
            "singles_ms": explanation.singles_ms,
            "interactions_ms": explanation.interactions_ms,
            "unexplained_ms": explanation.unexplained_ms,
        },
        "explained": explanation.rows,
        "work": result.work,
        "ranks": result.ranks,
        "steps": result.steps,
        "definitions": definitions(result),
    }
    if fail_over_pct is not None:
        failed, line = gate_line(result, fail_over_pct)
        payload["gate"] = {"fail_over_pct": fail_over_pct, "failed": failed, "line": line}
    return payload


def _totals_notes(result: RunDiff) -> tuple[str, ...]:
    e = result.explanation
    return (
        (
            f"mean step change {_signed(e.mean_change_ms)}: every group and link at BASE's speed together saves "
            f"{_ms(e.all_saving_ms)}; the singles' sum {_ms(e.singles_ms)}, interactions {_signed(e.interactions_ms)}; "
            f"not modelled by replay {_signed(e.unexplained_ms)}"
        ),
    )


def _explained_title(result: RunDiff) -> str:
    if result.step_change.beyond_noise:
        return "what explains the change (NEW with only that at BASE's speed)"
    return "largest changes in duration: none moves the median step beyond noise"


def _rank_view(ranks: pl.DataFrame) -> pl.DataFrame:
    """``RANK_CHANGE_SCHEMA`` under names short enough for a 100-column terminal; overlap only on GPU runs."""
    names = {"base_bubble_pct": "base_bubble", "new_bubble_pct": "new_bubble", "bubble_change_pct": "bubble_pts",
             "base_busy_ms": "base_busy_ms", "new_busy_ms": "new_busy_ms", "busy_change_ms": "busy_ms"}  # fmt: skip
    view = ranks.select("rank", *(pl.col(k).alias(v) for k, v in names.items()))
    if ranks["overlap_change_pct"].null_count() < ranks.height:
        view = view.with_columns(ranks["overlap_change_pct"].alias("overlap_pts"))
    return view


def diff_result(result: RunDiff, fail_over_pct: float | None = None) -> Result:
    """The payload and the tables of ``tracekit diff``."""
    change, host = result.step_change, result.host
    waits = (None, None) if host is None else (host.base_ms, host.new_ms)
    steps = pl.DataFrame(
        [
            {
                "run": run,
                "steps": s.steps,
                "median_ms": s.median_ms,
                "spread_ms": s.spread_ms,
                "min_ms": s.min_ms,
                "max_ms": s.max_ms,
                "host_wait_ms": wait,
            }
            for run, s, wait in zip(("base", "new"), (change.base, change.new), waits)
        ],
        schema_overrides={"host_wait_ms": pl.Float64()},
    )
    shown = shown_rows(result)
    tables = [
        Table(
            "each run's steps",
            steps,
            notes=(f"base: {result.base.source}; new: {result.new.source}",),
            name="steps",
        ),
        Table(
            _explained_title(result),
            shown.select(_EXPLAINED_COLUMNS),
            notes=_totals_notes(result),
            name="explained",
            shown=not shown.is_empty(),
        ),
    ]
    if not result.work.is_empty():
        tables.append(Table("work only one run has", result.work, name="work"))
    if result.ranks is not None:
        tables.append(Table("per rank: bubble (% of the step windows) and busy time per step", _rank_view(result.ranks),
                            name="ranks"))  # fmt: skip
    tables.append(Table("every explained row", result.explanation.rows, name="explained_all", shown=False))
    return Result(
        payload=diff_payload(result, fail_over_pct),
        tables=tuple(tables),
        warnings=result.warnings,
        headline=(headline(result),),
        definitions=tuple(f"{name}: {text}" for name, text in definitions(result).items()),
    )


def _markdown_table(frame: pl.DataFrame) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"
        return str(value)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join(lines)


def diff_markdown(result: RunDiff, fail_over_pct: float | None = None) -> str:
    """The diff as Markdown for a pull-request comment: headline, what explains it, work and ranks."""
    change = result.step_change
    parts = [f"**{headline(result)}**", ""]
    if fail_over_pct is not None:
        parts += [gate_line(result, fail_over_pct)[1], ""]
    parts += [
        (
            f"BASE `{result.base.source}`: {change.base.steps} steps, median {_ms(change.base.median_ms)} "
            f"(spread {_ms(change.base.spread_ms)}); NEW `{result.new.source}`: {change.new.steps} steps, median "
            f"{_ms(change.new.median_ms)} (spread {_ms(change.new.spread_ms)})."
        ),
        "",
    ]
    shown = shown_rows(result)
    if not shown.is_empty():
        parts += [f"### {_explained_title(result).capitalize()}", "", _markdown_table(shown.select(_EXPLAINED_COLUMNS)),
                  "", *_totals_notes(result), ""]  # fmt: skip
    if not result.work.is_empty():
        parts += ["### Work only one run has", "", _markdown_table(result.work), ""]
    if result.ranks is not None:
        parts += ["<details><summary>Per rank: bubble (% of the step windows) and busy time per step</summary>", "",
                  _markdown_table(_rank_view(result.ranks)), "",
                  "</details>", ""]  # fmt: skip
    parts += [f"- {name}: {text}" for name, text in definitions(result).items()]
    return "\n".join(parts) + "\n"
