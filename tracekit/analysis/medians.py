"""Leave-one-out medians: the median of the values every other rank holds, for each rank at once.

The ideal (``tracekit.analysis.ideal``), the straggler references (``tracekit.analysis.references``)
and the link references (``tracekit.stragglers.links``) each set a rank beside the median of the
others; sorting once and skipping one rank's places answers each rank without a rescan.

Not for: choosing whose values count (the callers' rules).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def middle_without(sorted_values: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """The middle one or two of ``sorted_values`` with the elements at sorted places ``removed`` left out.

    Their median is the median of the values kept; empty when none are kept.
    """
    remaining = sorted_values.size - removed.size
    if remaining <= 0:
        return sorted_values[:0]
    # The k-th kept value sits at k plus the number of removed places at or before it.
    shifted = removed - np.arange(removed.size)
    middle = np.array([remaining // 2] if remaining % 2 else [remaining // 2 - 1, remaining // 2])
    return sorted_values[middle + np.searchsorted(shifted, middle, side="right")]


class RankValues:
    """Values that ranks hold, sorted, with where each rank's values sit: medians without one rank's."""

    def __init__(self, values: Sequence[float], ranks: Sequence[int]) -> None:
        order = np.argsort(np.asarray(values, dtype=np.float64), kind="stable")
        self.sorted = np.asarray(values, dtype=np.float64)[order]
        self._places: dict[int, list[int]] = {}
        for place, index in enumerate(order.tolist()):
            self._places.setdefault(ranks[index], []).append(place)

    def without(self, rank: int) -> tuple[int, np.ndarray]:
        """(how many other ranks hold values, the middle one or two of their values in order).

        ``np.median`` of those middle values is ``np.median`` of all the other ranks' values.
        """
        removed = np.asarray(sorted(self._places.get(rank, ())), dtype=np.int64)
        others = len(self._places) - (rank in self._places)
        return others, middle_without(self.sorted, removed)
