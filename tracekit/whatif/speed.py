"""An op at another speed: what it would have lasted had its group run at a target median.

A counterfactual puts a group of ops (one rank's forwards, NEW's weight gradients of one stage)
at another group's speed: a straggler at its peers', NEW at BASE's. Each op of the group moves by
the *systematic* change and keeps its own noise:

- an op at or below its group's median scales by ``factor = target / median``: a kernel twice as
  slow is twice as slow at any size, and an op never shrinks below zero;
- an op above its group's median keeps its excess over the median and moves by the median's change,
  ``median x (factor - 1)``: the run queue, a page fault or a collector flush that stretched that op
  was not what made the group slow, so putting the group at speed does not take it away.

Scaling every op by the factor instead credits the group with a share of each of its outliers:
with a planted 0.5 ms sleep doubling a 0.5 ms op (factor 0.5), a 6 ms descheduling on one op
would give back 3 ms that the planted change never cost. On a quiet run, where an op's
durations sit close to their median, both rules give the same figures.

Not for: choosing the target (``tracekit.analysis.ideal``, ``tracekit.changes.explain``).
"""

from __future__ import annotations

import numpy as np


def at_speed(durations_ms: np.ndarray, factors: np.ndarray, medians_ms: np.ndarray) -> np.ndarray:
    """Each op's duration with its group at ``factor`` times its median speed (arrays of one op each).

    ``factors``: target median / the group's median (1: unchanged); ``medians_ms``: the group's
    median duration. Ops at or below the median scale; ops above it shift by the median's change.
    """
    scaled = durations_ms * factors
    shifted = durations_ms + medians_ms * (factors - 1.0)
    return np.where(durations_ms <= medians_ms, scaled, shifted)
