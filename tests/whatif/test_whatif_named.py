"""The gap to the named schedule's prediction splits exactly into stragglers, exposed time and order."""

from __future__ import annotations

import pytest
from whatif.simulated_runs import simulated_actions

from collectors.manifest import Manifest, RunSchedule
from tracekit.whatif.attribution import what_if
from tracekit.whatif.named import compare_named
from tracekit.whatif.pipeline import pipeline_case


def _manifest(name: str) -> Manifest:
    schedule = RunSchedule(name, name, pp_size=4, num_stages=4, microbatches=8, paths=())
    return Manifest(world_size=0, complete=False, ranks=(), schedule=schedule)


@pytest.mark.parametrize("name", ["1f1b", "zbv", "dualpipev"])
def test_a_run_that_followed_its_schedule_at_typical_speed_loses_nothing(name: str) -> None:
    case, _ = pipeline_case(simulated_actions(name), name)

    named, warnings = compare_named(case, _manifest(name), what_if(case))

    assert warnings == () and named is not None
    assert named.gain_lost_ms == pytest.approx(0.0, abs=1e-6)
    assert named.order_ms == pytest.approx(0.0, abs=1e-6)


def test_a_straggler_shows_as_stragglers_and_the_parts_add_up() -> None:
    case, _ = pipeline_case(simulated_actions("1f1b", slow_rank=2, factor=2.0), "1f1b")

    named, _ = compare_named(case, _manifest("1f1b"), what_if(case))

    assert named is not None and named.stragglers_ms > 10
    assert named.order_ms == pytest.approx(0.0, abs=1e-6)
    total = named.stragglers_ms + named.exposed_comm_and_rest_ms + named.order_ms
    assert total == pytest.approx(named.gain_lost_ms)


def test_a_run_in_another_order_shows_the_order_cost() -> None:
    case, _ = pipeline_case(simulated_actions("zb-h1"), "zb-h1")

    named, _ = compare_named(case, _manifest("zb-h2"), what_if(case))

    assert named is not None and named.order_ms == pytest.approx(named.gain_lost_ms) == pytest.approx(
        49.0 - 46.0
    )


def test_a_schedule_needing_kinds_the_run_never_ran_is_refused_with_the_reason() -> None:
    case, _ = pipeline_case(simulated_actions("gpipe"), "gpipe")

    named, warnings = compare_named(case, _manifest("zb-h1"), what_if(case))

    assert named is None and "no measured cost" in warnings[0]


@pytest.mark.parametrize(
    "manifest", [None, _manifest("my-own")]
)
def test_no_comparison_without_a_known_named_schedule(manifest) -> None:
    case, _ = pipeline_case(simulated_actions("1f1b"), "1f1b")

    named, warnings = compare_named(case, manifest, what_if(case))

    assert named is None and "no named-schedule comparison" in warnings[0]
