"""What the live aggregator makes of successive intervals: alerts, persistence, capture on anomaly.

A rank flagged by the straggler scoring in an interval raises an alert, named by the kind that puts
the most excess time on it (that kind may change from one interval to the next: the rank stays the
straggler). It is ``persistent`` once it has been flagged in ``persist_intervals`` intervals in a
row, ``transient`` before (an interval where it is not flagged starts the count again). The first time a straggler is
persistent, and no capture ran within ``capture_period_s``, the tracker asks for a full
torch.profiler capture of ``capture_steps`` steps, to start a couple of steps ahead so that every
rank receives the request before that step.

State is a counter per rank: memory stays bounded however long the job runs.

Not for: scoring (``tracekit.live.assess``) or sending anything (``tracekit.live.aggregator``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracekit.live.assess import IntervalAssessment, LiveConfig, flagged_stragglers

CAPTURE_LEAD_STEPS = 2
"""A capture starts at least this many steps after the latest step any rank has reported (the
aggregator adds the steps that run while it judges, so the request reaches every rank in time)."""


@dataclass(frozen=True)
class CaptureRequest:
    """Profile steps ``first_step`` .. ``first_step + steps - 1`` on every rank into ``directory``."""

    first_step: int
    steps: int
    directory: str
    rank: int
    """The straggler that triggered it."""
    kind: str

    def message(self) -> dict[str, Any]:
        """The ``capture`` message of ``collectors.live_wire``."""
        return {"t": "capture", "first_step": self.first_step, "steps": self.steps, "dir": self.directory}


@dataclass
class Tracker:
    """Streaks of flagged intervals per rank, and when the last capture was asked for."""

    config: LiveConfig
    streaks: dict[int, int] = field(default_factory=dict)
    last_capture_s: float | None = None
    captures: list[CaptureRequest] = field(default_factory=list)

    def update(
        self,
        assessment: IntervalAssessment,
        latest_step: int,
        now_s: float,
        lead_steps: int = CAPTURE_LEAD_STEPS,
    ) -> tuple[list[dict[str, Any]], CaptureRequest | None]:
        """Alerts of this interval (live.jsonl ``alert`` records) and a capture to ask for, if any."""
        flagged = flagged_stragglers(assessment)
        keys = {a["rank"] for a in flagged}
        self.streaks = {key: self.streaks.get(key, 0) + 1 for key in keys}
        alerts = []
        for alert in flagged:
            streak = self.streaks[alert["rank"]]
            alerts.append(
                {
                    "type": "alert",
                    "step": assessment.steps[-1],
                    "interval": assessment.index,
                    **alert,
                    "persistent": streak >= self.config.persist_intervals,
                    "intervals": streak,
                }
            )
        return alerts, self._capture(alerts, latest_step + max(lead_steps, CAPTURE_LEAD_STEPS), now_s)

    def _capture(self, alerts: list[dict[str, Any]], first: int, now_s: float) -> CaptureRequest | None:
        if self.config.capture_steps == 0:
            return None
        persistent = [a for a in alerts if a["persistent"]]
        recent = (
            self.last_capture_s is not None and now_s - self.last_capture_s < self.config.capture_period_s
        )
        if not persistent or recent:
            return None
        worst = max(persistent, key=lambda a: a["saving_ms"])
        request = CaptureRequest(
            first_step=first,
            steps=self.config.capture_steps,
            directory=f"capture-step{first:06d}",
            rank=worst["rank"],
            kind=worst["kind"],
        )
        self.last_capture_s = now_s
        self.captures.append(request)
        return request
