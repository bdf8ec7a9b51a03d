"""Real captures of the example job with planted stragglers and slow links, run a few at a time.

Imported by tests as ``stragglers.straggler_runs`` (``tests/`` is on the path through its conftest).
The straggler sleeps (``--slow-how sleep``): it frees its core, so a loaded machine stays no more
loaded, and the planted delay stands far above this machine's noise (30 ms per forward and per
backward of each stage module, against about 1-3 ms of compute).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SLOW_MS = 30.0
"""The planted delay per forward and per backward of each of the straggler's stage modules."""

STEPS = 3
"""Job steps; steps 1 and 2 are captured."""

SMALL_HIDDEN, SMALL_ROWS = 128, 16
"""``examples/small_model.py``'s size: the A/B pairs' model, so that a clean step is the schedule's, not the cores'."""

PARALLEL = 2
"""Captures running at once (their ranks mostly sleep or wait)."""

TIMEOUT_S = 900
"""Wall-clock limit of one batch of captures: generous, a shared machine can be many times oversubscribed."""


@dataclass(frozen=True)
class Job:
    """One capture of the example job."""

    name: str
    schedule: str
    ranks: int = 4
    slow_rank: int | None = None
    slow_ms: float = SLOW_MS
    slow_link: tuple[int, int] | None = None
    slow_link_ms: float = SLOW_MS
    dp: int = 1
    """Data-parallel replicas of the ``ranks``-rank pipeline (``--dp``)."""
    microbatches: int = 8
    small: bool = False
    """The model of ``examples/small_model.py`` (its ranks' compute fits on two cores), not the job's default."""
    slow_how: str = "sleep"
    """How the straggler loses its time (``--slow-how``: sleep, spin or gc)."""
    cpus: tuple[int, ...] | None = None
    """The CPU each rank is pinned to (``--cpus``), or None."""

    def command(self, out: Path) -> list[str]:
        """``tracekit record`` of this job into ``out``."""
        job = [sys.executable, "-m", "examples.pipeline_job", "--schedule", self.schedule,
               "--ranks", str(self.ranks), "--microbatches", str(self.microbatches), "--steps", str(STEPS)]  # fmt: skip
        if self.small:
            job += ["--hidden", str(SMALL_HIDDEN), "--microbatch-rows", str(SMALL_ROWS)]
        if self.dp > 1:
            job += ["--dp", str(self.dp)]
        if self.slow_rank is not None:
            job += ["--slow-rank", str(self.slow_rank), "--slow-ms", str(self.slow_ms), "--slow-how", self.slow_how]
        if self.cpus is not None:
            job += ["--cpus", ",".join(map(str, self.cpus))]
        if self.slow_link is not None:
            job += ["--slow-link", f"{self.slow_link[0]}:{self.slow_link[1]}", "--slow-link-ms", str(self.slow_link_ms)]
        return [sys.executable, "-m", "tracekit", "record", "--out", str(out), "--steps", f"1:{STEPS}",
                "--format", "json", "--", *job]  # fmt: skip


SLOW_LINK_JOB = Job("link-12", "1f1b", 4, slow_link=(1, 2), slow_link_ms=40, microbatches=4, small=True)
"""A clean 4-rank pipeline whose link between ranks 1 and 2 is slow (40 ms per transfer): the one
capture both straggler modules read (``slow_link_run``), made alone so that its ranks show their own
compute speed (a neighbouring capture's export can make a link end's backward look slow)."""


def record_all(root: Path, jobs: list[Job], parallel: int = PARALLEL) -> dict[str, Path]:
    """Capture every job under ``root`` (``parallel`` at a time); name -> run directory."""
    done: dict[str, Path] = {}
    for start in range(0, len(jobs), parallel):
        batch = [(job, root / job.name) for job in jobs[start : start + parallel]]
        running = [
            (job, out, subprocess.Popen(job.command(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            for job, out in batch
        ]
        for job, out, process in running:
            try:
                _, stderr = process.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                for _job, _out, other in running:
                    other.terminate()  # tracekit record passes it on to the job's ranks
                    other.communicate()
                raise AssertionError(f"capture {job.name} did not finish in {TIMEOUT_S} s") from None
            assert process.returncode == 0, f"capture {job.name} failed:\n{stderr[-2000:]}"
            done[job.name] = out
    return done
