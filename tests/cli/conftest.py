"""Fixtures of the command-line tests: a small labelled run to report on."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def two_rank_run(tmp_path: Path, make_trace) -> Path:
    """Two ranks of real profiler traces, each with two steps of one forward and one backward."""
    root = tmp_path / "run"
    root.mkdir()
    for rank in range(2):
        labels = [(f"tracekit:step#{n}", [f"tracekit:{rank}F0", f"tracekit:{rank}B0"]) for n in (0, 1)]
        make_trace(root / f"rank{rank}.json.gz", labels, rank=rank, world_size=2)
    return root
