"""Calibration from the committed sample runs (real CPU captures under sample_traces/)."""

from __future__ import annotations

import pytest

from tracekit.run_analysis import realized_actions
from tracekit.planner.calibrate import calibration_scale
from tracekit.planner.costs import engine_costs, layout
from tracekit.planner.plan import plan
from tracekit.planner.spec import PlannerError
from tracekit.present.plan import assumptions
from tracekit.schedule.realized import realized_costs, schedule_from_realized
from tracekit.trace.run import load_run

from .specs import SAMPLE_TRACES, small_spec


@pytest.fixture(scope="module")
def one_f_one_b():
    return realized_actions(load_run(SAMPLE_TRACES / "1f1b"))


@pytest.fixture(scope="module")
def dualpipe_run():
    return realized_actions(load_run(SAMPLE_TRACES / "deepseek-dualpipe"))


def test_calibrated_forward_lands_among_the_measured_ones(one_f_one_b) -> None:
    spec = small_spec()
    captured = schedule_from_realized(one_f_one_b, step=0)

    scale, _ = calibration_scale(spec, one_f_one_b)
    estimated = engine_costs(spec, captured, layout(spec, 4), scale)
    measured = realized_costs(one_f_one_b, num_stages=4)

    assert min(measured.forward) <= estimated.forward[1] <= max(measured.forward)
    assert min(measured.full_backward) <= estimated.full_backward[1] <= max(measured.full_backward)


def test_kinds_the_run_never_ran_borrow_a_factor_and_say_so(one_f_one_b) -> None:
    scale, notes = calibration_scale(small_spec(), one_f_one_b)

    assert scale.backward_input == scale.backward_weight == scale.full_backward
    assert any(note.startswith("backward_input: not run alone") for note in notes)
    assert any(note.startswith("overlapped F&B: no pair in the run") for note in notes)


def test_a_dualpipe_run_measures_its_pairs(dualpipe_run) -> None:
    scale, notes = calibration_scale(small_spec(), dualpipe_run)

    assert not any("not run alone" in note or "no pair" in note for note in notes)
    assert scale.overlapped > 0 and scale.backward_weight != scale.backward_input


def test_calibrated_plan_scales_every_step(one_f_one_b) -> None:
    spec = small_spec(pp=4)
    scale, notes = calibration_scale(spec, one_f_one_b)

    estimated = plan(spec).alternatives.filter(schedule="1f1b")["step_ms"][0]
    calibrated = plan(spec, scale, notes)

    assert calibrated.alternatives.filter(schedule="1f1b")["step_ms"][0] != pytest.approx(estimated)
    assert assumptions(calibrated)[-1] == notes[-1]


def test_a_run_deeper_than_the_model_is_refused(dualpipe_run) -> None:
    spec = small_spec()
    shallow = type(spec)(spec.cluster, type(spec.model)(**(vars(spec.model) | {"layers": 3})), spec.training)

    with pytest.raises(PlannerError, match="4 stages along a path but the spec's model only 3 layers"):
        calibration_scale(shallow, dualpipe_run)
