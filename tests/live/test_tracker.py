"""Alerts across intervals: transient, then persistent; one capture per period."""

from __future__ import annotations

import polars as pl
import pytest
from live_samples import slowed, summaries_of

from tracekit.live.assess import IntervalAssessment, LiveConfig, assess_interval
from tracekit.live.tracker import CAPTURE_LEAD_STEPS, Tracker

ALL = {0, 1, 2, 3}


@pytest.fixture(scope="module")
def intervals(sample_actions: pl.DataFrame) -> dict[str, IntervalAssessment]:
    config = LiveConfig()
    return {
        "clean": assess_interval(0, summaries_of(sample_actions), ALL, config),
        "slow": assess_interval(0, summaries_of(slowed(sample_actions, 2, "B", 6.0)), ALL, config),
    }


def test_a_straggler_turns_persistent_after_k_intervals_and_a_gap_starts_the_count_again(
    intervals: dict[str, IntervalAssessment],
) -> None:
    tracker = Tracker(LiveConfig(persist_intervals=2, capture_steps=0))
    pattern = ["slow", "slow", "slow", "clean", "slow"]
    seen = []
    for index, name in enumerate(pattern):
        alerts, capture = tracker.update(intervals[name], latest_step=10 * index, now_s=index)
        assert capture is None
        seen.append([(a["rank"], a["kind"], a["persistent"]) for a in alerts])
    assert seen == [[(2, "B", False)], [(2, "B", True)], [(2, "B", True)], [], [(2, "B", False)]]


def test_a_persistent_straggler_asks_for_one_capture_per_period(
    intervals: dict[str, IntervalAssessment],
) -> None:
    tracker = Tracker(LiveConfig(persist_intervals=2, capture_steps=3, capture_period_s=100))
    asked = []
    for index, now_s in enumerate([0, 10, 20, 30, 150]):
        _, capture = tracker.update(intervals["slow"], latest_step=40 + index, now_s=now_s)
        asked.append(capture)
    first = asked[1]
    assert asked[0] is None and asked[2] is None and asked[3] is None
    assert first is not None and first.first_step == 41 + CAPTURE_LEAD_STEPS and first.steps == 3
    assert (first.rank, first.kind) == (2, "B")
    assert first.message() == {"t": "capture", "first_step": 43, "steps": 3, "dir": "capture-step000043"}
    assert asked[4] is not None and asked[4].first_step == 44 + CAPTURE_LEAD_STEPS
