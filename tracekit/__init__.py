"""tracekit: measure what a pipeline-parallel training run really did, from its profiler traces.

``tracekit.analyse(path)`` opens a run for analysis (``tracekit.run_analysis``, docs/api.md);
``tracekit.diff(base, new)`` compares two runs of the same job (``tracekit.run_diff``, docs/diff.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["AnalysisConfig", "DiffConfig", "RunAnalysis", "RunDiff", "analyse", "diff"]

_DIFF_NAMES = ("DiffConfig", "RunDiff", "diff")

if TYPE_CHECKING:
    from tracekit.run_analysis import AnalysisConfig, RunAnalysis, analyse
    from tracekit.run_diff import DiffConfig, RunDiff, diff


def __getattr__(name: str) -> Any:
    # Imported on first use: ``import tracekit`` stays free of polars for the collectors' side.
    if name in _DIFF_NAMES:
        from tracekit import run_diff

        return getattr(run_diff, name)
    if name in __all__:
        from tracekit import run_analysis

        return getattr(run_analysis, name)
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
