"""The live aggregator's Prometheus endpoint (``tracekit record --live --prometheus-port P``).

Gauges, refreshed once per interval (names and labels are documented in docs/live.md):

- ``tracekit_live_step_ms{rank}``: median of the rank's own step durations, ms;
- ``tracekit_live_bubble_fraction{rank}``: idle share of the steps' windows;
- ``tracekit_live_straggler_score{rank,kind}``: straggler score (1 typical, below 1 slower);
- ``tracekit_live_saving_ms{rank,kind}``: what-if step-time saving with that rank's kind at reference speed;
- ``tracekit_live_dropped_summaries{rank}``: summaries the rank could not send;
- ``tracekit_live_rank_up{rank}``: 1 while the rank reports, 0 once it is lost or done;
- ``tracekit_live_alerts_total{rank,kind}`` (counter) and ``tracekit_live_interval`` (last interval judged).

A private registry, so nothing of the process's own default metrics leaks in. Not for computing
any figure (``tracekit.live.assess``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from tracekit.live.assess import IntervalAssessment


class LiveMetrics:
    """Per-rank gauges served over HTTP on ``port`` (all interfaces: Prometheus scrapes from elsewhere)."""

    def __init__(self, port: int, address: str = "0.0.0.0") -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.step_ms = Gauge("tracekit_live_step_ms", "Median own step duration, ms", ["rank"], registry=r)
        self.bubble = Gauge(
            "tracekit_live_bubble_fraction", "Idle share of the step windows", ["rank"], registry=r
        )
        self.score = Gauge(
            "tracekit_live_straggler_score",
            "Straggler score (1 typical, below 1 slower)",
            ["rank", "kind"],
            registry=r,
        )
        self.saving = Gauge(
            "tracekit_live_saving_ms",
            "Step-time saving at reference speed (what-if), ms",
            ["rank", "kind"],
            registry=r,
        )
        self.dropped = Gauge(
            "tracekit_live_dropped_summaries", "Summaries the rank dropped", ["rank"], registry=r
        )
        self.up = Gauge("tracekit_live_rank_up", "1 while the rank reports", ["rank"], registry=r)
        self.alerts = Counter("tracekit_live_alerts", "Straggler alerts raised", ["rank", "kind"], registry=r)
        self.interval = Gauge("tracekit_live_interval", "Index of the last interval judged", registry=r)
        try:
            self.server, self.thread = start_http_server(port, addr=address, registry=r)
        except OSError as error:
            # The aggregator's one line, not a traceback; ``tracekit record`` checks the port before
            # the job starts, so this is a port taken in between, and record reports the failure.
            raise SystemExit(
                f"tracekit: live aggregator: cannot serve the Prometheus metrics on port {port}: "
                f"{(error.strerror or str(error)).lower()}"
            ) from None

    def update(self, assessment: IntervalAssessment, alerts: Iterable[dict[str, Any]]) -> None:
        """Refresh every gauge from one interval."""
        for row in assessment.ranks.iter_rows(named=True):
            rank = str(row["rank"])
            self.step_ms.labels(rank).set(row["step_ms"])
            self.bubble.labels(rank).set(row["bubble_fraction"])
            self.dropped.labels(rank).set(row["dropped"])
            self.up.labels(rank).set(1)
        for row in assessment.scores.iter_rows(named=True):
            labels = (str(row["rank"]), row["kind"])
            self.score.labels(*labels).set(_finite(row["score"]))
            self.saving.labels(*labels).set(_finite(row["saving_ms"]))
        for alert in alerts:
            self.alerts.labels(str(alert["rank"]), alert["kind"]).inc()
        self.interval.set(assessment.index)

    def rank_down(self, rank: int) -> None:
        """The rank is lost or done."""
        self.up.labels(str(rank)).set(0)

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()


def _finite(value: float | None) -> float:
    return math.nan if value is None else value
