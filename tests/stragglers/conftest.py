"""Fixtures of the straggler tests: the slow-link capture that both capture modules read."""

from __future__ import annotations

from pathlib import Path

import pytest
from stragglers.straggler_runs import SLOW_LINK_JOB, record_all


@pytest.fixture(scope="session")
def slow_link_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``SLOW_LINK_JOB`` captured once per session, alone; tests only read it."""
    return record_all(tmp_path_factory.mktemp("slow-link"), [SLOW_LINK_JOB], parallel=1)[SLOW_LINK_JOB.name]
