"""Fixtures of the live tests."""

from __future__ import annotations

import polars as pl
import pytest
from live_samples import SAMPLE_1F1B

from tracekit.run_analysis import realized_actions
from tracekit.trace.run import load_run


@pytest.fixture(scope="session")
def sample_actions() -> pl.DataFrame:
    """The realized actions of the committed 4-rank 1F1B capture (2 steps)."""
    return realized_actions(load_run(SAMPLE_1F1B))
