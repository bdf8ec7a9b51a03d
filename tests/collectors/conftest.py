"""Fixtures for the collectors' tests: real multi-process captures through ``tracekit record``.

Each capture runs once per session (``captured_run``) and is shared by every test that reads it;
a 4-rank capture of the example job takes a few seconds on two cores.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from collector_runs import Recorded, example_job, record


@pytest.fixture(scope="session")
def captured_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Recorded]:
    """``captured_run(schedule)``: a 4-rank, 8-micro-batch capture of steps 1-2, made once per session."""
    runs: dict[str, Recorded] = {}

    def get(schedule: str) -> Recorded:
        if schedule not in runs:
            out_dir = tmp_path_factory.mktemp(f"capture-{schedule}")
            runs[schedule] = record(out_dir, example_job(schedule))
            assert runs[schedule].exit_code == 0, runs[schedule].stderr[-3000:]
        return runs[schedule]

    return get
