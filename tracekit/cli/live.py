"""The ``--live`` options of ``tracekit record`` and the result of a live session (docs/live.md).

Kept apart from ``tracekit.cli.record`` so that the record command only wires them in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import polars as pl

from tracekit.cli.output import Result, Table
from tracekit.live.assess import LiveConfig
from tracekit.live.session import LiveOptions, LiveOutcome
from tracekit.stragglers.scoring import StragglerConfig

_ALERT_COLUMNS: dict[str, pl.DataType] = {
    "step": pl.Int64(),
    "rank": pl.Int32(),
    "stage": pl.String(),
    "kind": pl.String(),
    "slower_pct": pl.Float64(),
    "saving_ms": pl.Float64(),
    "persistent": pl.Boolean(),
}

_OPTIONS = (
    click.option("--live", is_flag=True, help="Watch the whole job: per-action timers, straggler alerts, "
                 "capture on anomaly, DIR/live.jsonl (docs/live.md). Without --steps, no window is captured up front."),
    click.option("--live-listen", default=LiveOptions.listen, show_default=True, metavar="HOST:PORT",
                 help="Where the aggregator listens (0.0.0.0:PORT lets ranks on other hosts reach it)."),
    click.option("--live-address", default=None, metavar="HOST:PORT",
                 help="Send to an aggregator started elsewhere instead of starting one "
                 "(ranks read TRACEKIT_LIVE_ADDRESS)."),
    click.option("--live-interval", default=LiveConfig.interval_steps, show_default=True, type=int,
                 help="Steps per interval: scores and prices are computed once per interval."),
    click.option("--live-persist", default=LiveConfig.persist_intervals, show_default=True, type=int,
                 help="Intervals in a row a straggler must be flagged to be persistent (and captured)."),
    click.option("--live-capture-steps", default=LiveConfig.capture_steps, show_default=True, type=int,
                 help="Steps of full profiler trace captured on a persistent straggler (0: never)."),
    click.option("--live-capture-period", default=LiveConfig.capture_period_s, show_default=True, type=float,
                 help="At most one capture on anomaly per this many seconds."),
    click.option("--prometheus-port", default=None, type=int, help="Serve per-rank gauges for Prometheus here."),
)  # fmt: skip


def live_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """Add the ``--live`` options to a click command."""
    for option in reversed(_OPTIONS):
        function = option(function)
    return function


def options_from(arguments: dict[str, Any], view: bool) -> LiveOptions:
    """LiveOptions from the command's ``--live-*`` arguments; click.BadParameter on bad values."""
    try:
        config = LiveConfig(
            interval_steps=arguments["live_interval"],
            persist_intervals=arguments["live_persist"],
            capture_steps=arguments["live_capture_steps"],
            capture_period_s=arguments["live_capture_period"],
            stragglers=StragglerConfig(),
        )
        return LiveOptions(
            config=config,
            listen=arguments["live_listen"],
            join=arguments["live_address"],
            prometheus_port=arguments["prometheus_port"],
            view=view,
        )
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def live_result(outcome: LiveOutcome, out_dir: Path) -> Result:
    """What a live session reports when the job is over: its alerts, captures and lost ranks."""
    alerts = [r for r in outcome.records if r.get("type") == "alert"]
    lost = [r for r in outcome.records if r.get("type") == "rank_lost"]
    end = next((r for r in outcome.records if r.get("type") == "end"), None)
    rows = [{**{k: a[k] for k in _ALERT_COLUMNS}, "stage": str(a["stage"])} for a in alerts]
    title = (
        f"{out_dir}: live session, {len(alerts)} alert(s), {len(outcome.captures)} capture(s) "
        f"(exit status {outcome.exit_code})"
    )
    notes = tuple(f"rank {r['rank']} lost after step {r['last_step']}: {r['reason']}" for r in lost)
    if outcome.log is None:
        notes += ("summaries went to an aggregator elsewhere (--live-address)",)
    payload = {
        "exit_code": outcome.exit_code,
        "live_log": None if outcome.log is None else str(outcome.log),
        "alerts": alerts,
        "rank_lost": lost,
        "captures": list(outcome.captures),
        "end": end,
    }
    table = Table(title=title, frame=pl.DataFrame(rows, schema=_ALERT_COLUMNS), notes=notes, name="alerts")
    return Result(payload=payload, tables=(table,), warnings=outcome.problems)
