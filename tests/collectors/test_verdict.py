"""The one line ``record`` adds when its command fails: the job's own failure, or the collector's part."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.manifest import Interruption, Manifest
from collectors.verdict import failure_line


def _manifest(exit_code: int | None, **fields: object) -> Manifest:
    return Manifest(world_size=0, complete=False, ranks=(), exit_code=exit_code, **fields)  # type: ignore[arg-type]


def test_a_failure_with_no_collector_problem_is_the_jobs() -> None:
    line = failure_line(_manifest(1))

    assert line is not None
    assert line.startswith("the command failed (exit status 1) and tracekit's collector reported no fault")
    assert "the failure is the job's" in line and "Root Cause" in line


def test_a_failure_with_collector_problems_counts_them_and_blames_no_one() -> None:
    problems = ("ranks 0, 1: the DualPipeV patch was switched off (an unknown torch version)",)

    line = failure_line(_manifest(2, collector_problems=problems))

    assert line is not None and "exit status 2" in line and "1 collector problem(s)" in line
    assert "the failure is the job's" not in line


@given(st.integers(min_value=1, max_value=255))
def test_every_non_zero_status_gets_exactly_one_line(status: int) -> None:
    line = failure_line(_manifest(status))

    assert line is not None and "\n" not in line and f"(exit status {status})" in line


@pytest.mark.parametrize("status", [0, None])
def test_a_command_that_did_not_fail_gets_no_line(status: int | None) -> None:
    assert failure_line(_manifest(status)) is None


def test_an_interrupted_command_gets_no_line() -> None:
    stop = Interruption(signal="SIGTERM", received_unix_ns=1, killed_after_grace=False)

    assert failure_line(_manifest(143, interruption=stop)) is None
