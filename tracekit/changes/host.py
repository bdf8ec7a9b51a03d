"""The host's part of a step change: how long each run's ranks waited for a CPU core, per step.

A shared machine's other work changes between two captures, and the job's steps change with it.
The collector's probes record each rank's run-queue wait over its capture window and the window's
wall time (the kernel's ``schedstat`` for the rank's main thread; ``tracekit.trace.probes``). Per
run, the **host's wait** is the median over its ranks of the share of the window they spent ready
but off a core, times the run's median step; its change is NEW's less BASE's.

A step change beyond the noise band is **the host's** when what is left of it once the host's
change is taken out lies within the band: the ranks spent the difference waiting for a core, not
running the job. The median rank stands for the step only where the ranks wait alike (a busy or
oversubscribed host); one rank waiting alone (a busy process pinned beside it) is a straggler's
cause, ``contended`` in ``tracekit stragglers``, and barely moves the median. What it cannot see:
time off a core that schedstat does not count, and the waits of the job's other threads (gloo's
transfer threads among them), so a host change can reach a run's transfers beyond what it shows.
Unknown (None) where either run lacks the probes or the window's wall time (op-tables, captures
without schedstat, probes written before the collector recorded it).

Not for: the step change itself (``tracekit.changes.steps``).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.changes.steps import StepChange

HOST_DEFINITION = (
    "host wait: the median over a run's ranks of the share of their capture window their main thread "
    "spent ready but off a core (run-queue wait), times the run's median step; a step change beyond "
    "noise is the host's when the change less NEW's minus BASE's host wait lies within the noise band"
)
"""The host's wait, as every output quotes it."""


@dataclass(frozen=True)
class HostChange:
    """Each run's host wait per step (ms) and what it says of a step change."""

    base_ms: float
    new_ms: float

    @property
    def change_ms(self) -> float:
        """NEW's host wait per step less BASE's."""
        return self.new_ms - self.base_ms

    def accounts_for(self, step: StepChange) -> bool:
        """True when ``step`` stands beyond its noise band only by the host's change."""
        return step.beyond_noise and abs(step.change_ms - self.change_ms) <= step.noise_ms


def host_wait_ms(window: pl.DataFrame, median_step_ms: float) -> float | None:
    """A run's host wait per step from its probes window (``rank``, ``runq_ms``, ``wall_ms``) and its
    median step; None when no rank has both its wait and the window's wall time."""
    shares = window.filter(pl.col("wall_ms") > 0).select(pl.col("runq_ms") / pl.col("wall_ms")).to_series()
    shares = shares.drop_nulls()
    if shares.is_empty():
        return None
    return float(shares.median()) * median_step_ms  # type: ignore[arg-type]


def host_change(base: float | None, new: float | None) -> HostChange | None:
    """Both runs' host waits per step (``host_wait_ms``); None when either is unknown."""
    return None if base is None or new is None else HostChange(base_ms=base, new_ms=new)
