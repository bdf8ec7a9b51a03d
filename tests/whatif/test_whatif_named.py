"""The gap to the named schedule's prediction, against closed forms of 1F1B and the Zero Bubble paper.

Runs come from the simulator (``whatif.simulated_runs``: F 2 ms, B = I + W = 2 + 1 ms, P = 4,
M = 8). 1F1B with uniform stages takes (M + P - 1)(F + B) = 55 ms; a latency per hop adds at
least the 2 (P - 1) hops of one micro-batch's round trip. With stage 2 at F = 4, B = 4 + 1 it is the bottleneck: its first forward can
start after stages 0 and 1 (4 ms), it is busy M (F + B) = 72 ms, its last gradient leaves through
stages 1 and 0 (6 ms), and it waits once, 1 ms, for the first gradient from stage 3 (its forward
of micro-batch 1 ends at 12, stage 3's backward of micro-batch 0 at 13): 4 + 72 + 6 + 1 = 83 ms.
"""

from __future__ import annotations

import pytest
from whatif.simulated_runs import simulated_actions

from collectors.manifest import Manifest, RunSchedule
from tracekit.analysis.ideal import ideal_durations
from tracekit.whatif.attribution import WhatIfConfig, what_if
from tracekit.whatif.case import ReplayCase
from tracekit.whatif.named import NamedComparison, compare_named
from tracekit.whatif.pipeline import pipeline_case


def _manifest(name: str) -> Manifest:
    schedule = RunSchedule(name, name, pp_size=4, num_stages=4, microbatches=8, paths=())
    return Manifest(world_size=0, complete=False, ranks=(), schedule=schedule)


def _against(case: ReplayCase, manifest: Manifest | None) -> tuple[NamedComparison | None, tuple[str, ...]]:
    """The comparison the way the analysis makes it: the what-if and the prediction on one ideal."""
    ideal = ideal_durations(case.ops)
    return compare_named(case, manifest, what_if(case, ideal=ideal.per_op(case.ops)), ideal)


def _compare(name: str, run: str | None = None, **simulated) -> tuple[NamedComparison | None, tuple[str, ...]]:
    case, _ = pipeline_case(simulated_actions(run or name, **simulated), run or name)
    return _against(case, _manifest(name))


@pytest.mark.parametrize("name", ["1f1b", "zbv", "dualpipev"])
def test_a_run_that_followed_its_schedule_at_typical_speed_loses_nothing(name: str) -> None:
    named, warnings = _compare(name)

    assert warnings == () and named is not None
    assert named.gain_lost_ms == pytest.approx(0.0, abs=1e-6)
    assert named.order_ms == pytest.approx(0.0, abs=1e-6)


def test_a_slow_stage_costs_what_the_bottleneck_closed_form_says() -> None:
    named, _ = _compare("1f1b", slow_rank=2, factor=2.0)

    assert named is not None
    assert named.predicted_ms == pytest.approx(55.0)
    assert named.measured_ms == pytest.approx(83.0, abs=1e-5)
    assert named.stragglers_ms == pytest.approx(83.0 - 55.0, abs=1e-5)
    assert named.exposed_comm_and_rest_ms == pytest.approx(0.0, abs=1e-5)
    assert named.order_ms == pytest.approx(0.0, abs=1e-6)


def test_communication_shows_as_exposed_time_not_as_stragglers() -> None:
    named, _ = _compare("1f1b", comm_ms=0.5)

    assert named is not None
    # at least one round trip of 2 (P - 1) hops more than without latency; all of it exposed
    assert named.measured_ms >= 55.0 + 2 * 3 * 0.5 - 1e-6
    # The replay keeps the recorded gaps (the measured step); the order at ideal costs has none.
    assert named.realized_ms == pytest.approx(named.measured_ms, abs=1e-5)
    assert named.typical_ms == pytest.approx(55.0, abs=1e-5)
    assert named.exposed_comm_and_rest_ms == pytest.approx(named.measured_ms - 55.0, abs=1e-5)
    assert named.stragglers_ms == pytest.approx(0.0, abs=1e-6)


def test_the_papers_replay_leaves_the_gaps_to_the_measured_step() -> None:
    case, _ = pipeline_case(simulated_actions("1f1b", comm_ms=0.5), "1f1b")
    ideal = ideal_durations(case.ops)
    result = what_if(case, WhatIfConfig(replay="durations"), ideal.per_op(case.ops))

    named, _ = compare_named(case, _manifest("1f1b"), result, ideal)

    assert named is not None
    assert named.realized_ms == pytest.approx(55.0, abs=1e-5) and named.ideal_ms == named.typical_ms
    assert named.exposed_comm_and_rest_ms == pytest.approx(named.measured_ms - 55.0, abs=1e-5)


def test_a_run_in_another_order_shows_the_order_cost() -> None:
    # Zero Bubble paper's ZB-H1 against ZB-H2 at these costs: 49 and 46 ms.
    named, _ = _compare("zb-h2", run="zb-h1")

    assert named is not None and named.order_ms == pytest.approx(49.0 - 46.0)
    assert named.gain_lost_ms == pytest.approx(49.0 - 46.0)


def test_a_schedule_needing_kinds_the_run_never_ran_is_refused_with_the_reason() -> None:
    named, warnings = _compare("zb-h1", run="gpipe")

    assert named is None and "no measured cost" in warnings[0]


@pytest.mark.parametrize("manifest", [None, _manifest("my-own")], ids=["no-manifest", "unknown-schedule"])
def test_no_comparison_without_a_known_named_schedule(manifest: Manifest | None) -> None:
    case, _ = pipeline_case(simulated_actions("1f1b"), "1f1b")

    named, warnings = _against(case, manifest)

    assert named is None and "no named-schedule comparison" in warnings[0]
