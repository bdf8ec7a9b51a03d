"""Capture pipeline-parallel training runs: per-rank torch.profiler traces with tracekit labels.

Runs inside the training job, so it imports torch and the standard library only, and nothing at all
until used: names below load on first access (``import collectors`` stays cheap for the injected
sitecustomize and for ``tracekit record``).

- ``Capture(out_dir, steps=range(1, 3))``: capture steps from Python (custom loops);
- ``step()``, ``mark(stage, kind, microbatch)``, ``mark_pair(...)``, ``mark_comm(op)``: label a
  custom loop's steps, actions and communication waits (docs/labels.md);
- ``write_manifest(out_dir)``: merge the ranks' sidecars into run.json;
- example jobs to capture sit outside this package, in ``examples/`` (``python -m examples.pipeline_job``).

Not for reading traces: that is tracekit's job (``tracekit.trace``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Capture": "collectors.api",
    "CaptureConfig": "collectors.capture",
    "MicrobatchPath": "collectors.manifest",
    "ScheduleInfo": "collectors.manifest",
    "mark": "collectors.api",
    "mark_comm": "collectors.api",
    "mark_pair": "collectors.api",
    "step": "collectors.api",
    "write_manifest": "collectors.merge",
}

__all__ = [
    "Capture",
    "CaptureConfig",
    "MicrobatchPath",
    "ScheduleInfo",
    "mark",
    "mark_comm",
    "mark_pair",
    "step",
    "write_manifest",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'collectors' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
