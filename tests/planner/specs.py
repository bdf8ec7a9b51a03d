"""Spec builders shared by the planner tests."""

from __future__ import annotations

from pathlib import Path

from tracekit.planner.spec import PlanSpec, load_spec

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "docs" / "examples"
"""The committed example specs."""
SAMPLE_TRACES = REPO_ROOT / "sample_traces"
"""Real CPU captures of the example job, one directory per schedule."""

SMALL_MODEL: dict[str, object] = {
    "name": "small",
    "layers": 16,
    "hidden": 2048,
    "heads": 16,
    "ffn": 8192,
    "vocab": 32000,
}
"""A 16-layer dense model (about 1B parameters)."""


def small_spec(cluster: dict[str, object] | None = None, **training: object) -> PlanSpec:
    """The small model on 32 H100s; ``training`` and ``cluster`` fields override the defaults."""
    values = {"sequence_length": 2048, "global_batch": 64, "micro_batch_size": 1} | training
    return load_spec(
        None,
        cluster="h100-32",
        overrides={"model": SMALL_MODEL, "training": values, "cluster": cluster or {}},
    )
