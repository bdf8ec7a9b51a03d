"""What changed between two runs of the same job, priced in step time (``tracekit.run_diff`` puts it together).

- ``shape``: whether the two runs can be compared (schedule, depth, world size, micro-batches, layout);
- ``steps``: each run's step times, the measured change and its noise band;
- ``explain``: the change decomposed by counterfactual replay of NEW into groups and links;
- ``work``: work one run has and the other not, and per-rank bubble and overlap changes.

Not for: reading traces (``tracekit.run_analysis``) or presenting (``tracekit.present.diff``).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracekit.run_diff import DiffConfig, RunDiff


class _CallablePackage(types.ModuleType):
    """This package, callable as ``tracekit.diff(base, new)``: importing it makes it ``tracekit.diff``."""

    def __call__(self, base: Any, new: Any, config: DiffConfig | None = None) -> RunDiff:
        """``tracekit.run_diff.diff``: compare ``new`` against ``base``."""
        from tracekit.run_diff import diff

        return diff(base, new, config)


sys.modules[__name__].__class__ = _CallablePackage
