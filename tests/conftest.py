"""Shared fixtures: paths to the shared real traces and a maker of small real profiler traces."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
SAMPLE_TRACES = REPO_ROOT / "sample_traces"

Label = str | tuple[str, Sequence["Label"]]
"""A label to record, or (label, nested labels) for a span around others."""


@pytest.fixture(autouse=True)
def _polars_threads_as_before() -> object:
    """A command run in this process sets POLARS_MAX_THREADS on two cores
    (``tracekit.cli.main.one_polars_thread``): put back after each test, so that no later test's
    processes inherit it."""
    before = os.environ.get("POLARS_MAX_THREADS")
    yield
    if before is None:
        os.environ.pop("POLARS_MAX_THREADS", None)
    else:
        os.environ["POLARS_MAX_THREADS"] = before


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared reference data beside the checkout; tests that need it skip when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"needs {SHARED} (shared reference data beside the checkout), absent here")
    return SHARED


def _record(labels: Sequence[Label]) -> None:
    import torch
    from torch.profiler import record_function

    for label in labels:
        name, children = (label, ()) if isinstance(label, str) else label
        with record_function(name):
            torch.ones(32, 32) @ torch.ones(32, 32)
            _record(children)


def write_trace(path: Path, labels: Sequence[Label], rank: int | None, world_size: int | None) -> Path:
    """Record ``labels`` with torch.profiler on CPU and export a real Kineto trace to ``path``.

    The profiler only writes distributedInfo inside a process group; a single test process has none,
    so the header is set to the given rank and world size (omitted when ``rank`` is None).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    raw = path.with_name(path.name + ".raw.json")
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        _record(labels)
    profiler.export_chrome_trace(str(raw))
    document = json.loads(raw.read_text())
    raw.unlink()
    if rank is not None:
        document["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world_size}
    text = json.dumps(document).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


@pytest.fixture
def make_trace() -> Callable[..., Path]:
    """Factory for small real traces: ``make_trace(path, labels, rank=0, world_size=1)``."""

    def make(path: Path, labels: Sequence[Label], rank: int | None = 0, world_size: int | None = 1) -> Path:
        return write_trace(path, labels, rank, world_size)

    return make
