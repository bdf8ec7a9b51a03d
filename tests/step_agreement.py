"""The one-step-time agreement, as a function: every output of one run states one step time and
one saving per rank (``test_one_step_time``), for the sample runs and for a real live capture
(``live/test_live_runs.py``). Imported by tests as ``step_agreement``.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from live.live_samples import summaries_of

from dashboards.build import IDEAL_NOTE, build_page
from dashboards.encoding import inline
from tracekit.analysis.ideal import IDEAL_DEFINITION
from tracekit.cli.main import cli
from tracekit.live.assess import LiveConfig, assess_interval, flagged_stragglers
from tracekit.run_analysis import analyse

REPO = Path(__file__).resolve().parents[1]
NS_MS = 1e-6
"""A figure that went through a ns timeline is within a nanosecond of the replay's."""
DRAWN_MS = 0.5e-4 + NS_MS
"""The page embeds numbers to 4 decimals (``dashboards.encoding.inline``)."""


def _drawn(value: float) -> float:
    """``value`` rounded as the page embeds it."""
    return inline(pl.DataFrame({"value": [value]}))["values"][0]["value"]


def _json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _dataset(page, key: str) -> list[dict]:
    (view,) = [view for section in page.sections for view in section.views if view.key == key]
    (rows,) = view.spec["datasets"].values()
    return rows


def assert_one_step_time(run: Path) -> None:
    """Every output of the run in ``run`` states one step time and one saving per rank (``test_one_step_time``'s docstring).

    Also called on a real ``tracekit record --live`` capture (tests/live/test_live_runs.py).
    """
    source = str(run)
    report, stragglers, whatif = (_json(command, source) for command in ("report", "stragglers", "whatif"))
    analysis = analyse(source)
    page = build_page(analysis)
    live = assess_interval(0, summaries_of(analysis.actions, sample=source), set(analysis.facts.ranks_present), LiveConfig())

    # The step: report's windows, what-if's measured and realized step, stragglers' and live's step.
    windows = dict(sorted({(row["step"], row["window"]) for row in report["steps"]}))
    assert [row["measured_ms"] for row in whatif["steps"]] == list(windows.values())
    step_ms = whatif["measured_step_time"]
    assert whatif["replay"] == "recorded"
    assert whatif["realized_step_time"] == pytest.approx(step_ms, abs=NS_MS)
    assert {row["step_ms"] for row in stragglers["ranks"]} == {step_ms}
    assert live.step_ms == step_ms
    # The dashboard's realized timeline spans the first step's window.
    drawn = _dataset(page, "timeline")
    realized_end = max(row["end_ms"] for row in drawn if row["timeline"] == "realized")
    assert realized_end == pytest.approx(next(iter(windows.values())), abs=DRAWN_MS)

    # One saving per rank: stragglers' price is what-if's, live's table and alerts, the dashboard's marks.
    savings = {row["rank"]: row["saving_ms"] for row in stragglers["ranks"]}
    assert {row["rank"]: row["saving_ms"] for row in whatif["rank_savings"]} == savings
    assert dict(live.ranks.select("rank", "saving_ms").iter_rows()) == savings
    alerts = flagged_stragglers(live)
    assert {alert["rank"]: alert["saving_ms"] for alert in alerts} == {
        row["rank"]: round(row["saving_ms"], 3) for row in stragglers["ranks"] if row["flagged"]
    }
    marked = {row["rank"]: row["straggler_ms"] for row in _dataset(page, "utilization") if row.get("straggler_ms")}
    assert marked == {row["rank"]: _drawn(row["saving_ms"]) for row in stragglers["stragglers"]}

    # One ideal: what-if's ideal step is the dashboard's ideal timeline, and its definition is quoted.
    ideal_end = max(row["end_ms"] for row in drawn if row["timeline"] == "ideal")
    assert ideal_end == pytest.approx(whatif["steps"][0]["ideal_ms"], abs=DRAWN_MS)
    assert analysis.ideal_timeline.step_ms.tolist() == [row["ideal_ms"] for row in whatif["steps"]]
    assert whatif["definitions"]["ideal"] == IDEAL_DEFINITION
    assert IDEAL_DEFINITION in IDEAL_NOTE


