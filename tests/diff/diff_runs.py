"""Real captures of the example job for the diff tests: clean and planted runs, captured one at a time.

Imported by tests as ``diff.diff_runs`` (``tests/`` is on the path through its conftest). The model is
``examples/small_model.py``'s (four ranks' compute fits two cores); each capture records five steps,
so each run's step-to-step spread is measured. Planted slowness sleeps (``--slow-how sleep``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from examples.small_model import Model

STEPS = 6
"""Job steps; steps 1 to 5 are captured."""


@dataclass(frozen=True)
class DiffJob:
    """One capture of ``examples.pipeline_job`` (``stragglers.straggler_runs.record_all`` runs it)."""

    name: str
    schedule: str = "1f1b"
    job_args: tuple[str, ...] = ()
    """Options after the model size: the planted slowness."""

    def command(self, out: Path) -> list[str]:
        """``tracekit record`` of this job into ``out``."""
        job = [sys.executable, "-m", "examples.pipeline_job", "--schedule", self.schedule, "--ranks", "4",
               "--microbatches", "8", "--steps", str(STEPS), *Model().args(), *self.job_args]  # fmt: skip
        return [sys.executable, "-m", "tracekit", "record", "--out", str(out), "--steps", f"1:{STEPS}",
                "--format", "json", "--", *job]  # fmt: skip


SLOW_RANK, SLOW_MS = 2, 60.0
"""The planted straggler: rank 2 sleeps 60 ms more in every forward and backward (about 100x an action:
the change must stand beyond the spread of steps on a machine loaded many times over)."""

SLOW_LINK, SLOW_LINK_MS = (1, 2), 60.0
"""The planted slow link: every wait on a transfer between ranks 1 and 2 returns 60 ms late."""

SLOW_W_RANK, SLOW_W_MS = 0, 2.0
"""ZB-V's rank 0 (stages 0 and 7) has slack around its weight gradients: each W sleeps 2 ms more (32 ms a
step). Two quiet captures of the clean job moved a rank's W by up to 13 ms a step, so 0.5 ms a W (8 ms)
could not be told from noise. At 2 ms a W the price is 40% to 67% of the own change (quiet, five pairs):
the waits in the run absorb the rest."""

JOBS = (
    DiffJob("1f1b-base"),
    DiffJob("1f1b-clean"),
    DiffJob("1f1b-slow-rank", job_args=("--slow-rank", str(SLOW_RANK), "--slow-ms", str(SLOW_MS), "--slow-how", "sleep")),
    DiffJob("1f1b-slow-link", job_args=("--slow-link", f"{SLOW_LINK[0]}:{SLOW_LINK[1]}", "--slow-link-ms", str(SLOW_LINK_MS))),
    DiffJob("zbv-base", "zbv"),
    DiffJob("zbv-slow-w", "zbv", ("--slow-rank", str(SLOW_W_RANK), "--slow-ms", str(SLOW_W_MS), "--slow-how", "sleep",
                                  "--slow-kinds", "W")),
)  # fmt: skip
"""Every capture, in the order they run: the clean repeat right after BASE, so that both meet the same load."""
