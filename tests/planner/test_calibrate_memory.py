"""Memory calibration: a run's measured bytes per parameter and per micro-batch replace the spec's."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.analysis.memory import STAGE_BYTES_SCHEMA
from tracekit.run_analysis import realized_actions
from tracekit.planner.calibrate_memory import memory_calibration
from tracekit.planner.costs import layout
from tracekit.trace.run import load_run

from .specs import SAMPLE_TRACES, small_spec


@pytest.fixture(scope="module")
def one_f_one_b() -> pl.DataFrame:
    return realized_actions(load_run(SAMPLE_TRACES / "1f1b"))


def _stages(per_mb: list[int], optimizer_bytes: int = 8) -> pl.DataFrame:
    rows = [(s, s, 100, 400, 400, optimizer_bytes * 100, mb, 8, 0, 0, 0) for s, mb in enumerate(per_mb)]
    return pl.DataFrame(rows, schema=STAGE_BYTES_SCHEMA, orient="row")


def test_measured_bytes_replace_the_specs(one_f_one_b: pl.DataFrame) -> None:
    spec = small_spec()
    estimated = [f.activation_bytes for f in layout(spec, 4).figures]
    calibrated, notes = memory_calibration(spec, one_f_one_b, _stages([int(2 * e) for e in estimated]))
    training = calibrated.training
    assert (training.param_bytes, training.grad_bytes, training.optimizer_bytes) == (4.0, 4.0, 8.0)
    assert training.activation_bytes == pytest.approx(2 * spec.training.activation_bytes, rel=1e-6)
    assert any("activation bytes x 2" in note for note in notes)


def test_an_optimizer_without_state_keeps_the_specs_optimizer_bytes(one_f_one_b: pl.DataFrame) -> None:
    spec = small_spec()
    calibrated, notes = memory_calibration(spec, one_f_one_b, _stages([1000] * 4, optimizer_bytes=0))
    assert calibrated.training.optimizer_bytes == spec.training.optimizer_bytes
    assert any("keeps no state" in note for note in notes)


def test_a_run_without_memory_changes_nothing_and_says_so(one_f_one_b: pl.DataFrame) -> None:
    spec = small_spec()
    calibrated, notes = memory_calibration(spec, one_f_one_b, pl.DataFrame(schema=STAGE_BYTES_SCHEMA))
    assert calibrated == spec and "no memory events" in notes[0]
