"""Real 4-rank captures with a planted cause each: the straggler's first cause is the planted one.

Each capture is made once per module and shared by the tests: a rank slowed by spinning
(``compute``), by sleeping (``blocked``), by forced garbage collections (``gc``), by a busy process
pinned to its core alone (``contended``), and a slow link (``link``); every other rank of the
pipeline ``waits`` on it. The causes are read from the collector's probes, on each rank's own clock.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from stragglers.straggler_runs import SLOW_LINK_JOB, Job, record_all

from tracekit.run_analysis import analyse
from tracekit.stragglers.own_clock import rank_contention

HOG_S = 240
"""The busy process's own time limit, s: it ends by itself even if the test dies."""

PLANTED = {
    "spin": ("compute", Job("spin-r1", "1f1b", 4, slow_rank=1, slow_ms=15, slow_how="spin", microbatches=4, small=True)),
    "sleep": ("blocked", Job("sleep-r2", "1f1b", 4, slow_rank=2, slow_ms=15, slow_how="sleep", microbatches=4, small=True)),
    "gc": ("gc", Job("gc-r2", "1f1b", 4, slow_rank=2, slow_ms=15, slow_how="gc", microbatches=4, small=True)),
}  # fmt: skip
"""Planted straggler -> (its cause, the capture)."""

HOG_RANK = 1
HOGGED = Job("hog-r1", "1f1b", 4, microbatches=4, cpus=(1, 0, 1, 1))
"""Rank 1 alone on CPU 0, beside the busy process; the other ranks on CPU 1."""

LINK = SLOW_LINK_JOB
"""The slow link 1-2: the session's ``slow_link_run``, which the straggler module reads too."""


def _hog() -> subprocess.Popen:
    """A busy loop pinned to CPU 0, at a higher priority where this user may raise it (bounded in time)."""
    loop = f"import time\nend = time.monotonic() + {HOG_S}\nwhile time.monotonic() < end:\n    pass\n"
    hog = subprocess.Popen([sys.executable, "-c", loop])
    os.sched_setaffinity(hog.pid, {0})
    try:
        os.setpriority(os.PRIO_PROCESS, hog.pid, -10)
    except OSError:
        pass  # not permitted: an equal-priority hog still takes half of the core
    return hog


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, slow_link_run: Path) -> dict[str, Path]:
    """Every capture, by job name (the slow link's made alone, once per session)."""
    if os.cpu_count() is None or os.cpu_count() < 2 or not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs two CPUs and sched_setaffinity to pin a busy process beside one rank")
    root = tmp_path_factory.mktemp("causes")
    done = record_all(root, [job for _, job in PLANTED.values()]) | {LINK.name: slow_link_run}
    hog = _hog()
    try:
        done |= record_all(root, [HOGGED], parallel=1)
    finally:
        hog.terminate()
        hog.wait()
    return done


def _first_causes(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    analysis = analyse(path)
    return analysis.stragglers.flagged, analysis.causes


def _assert_waits_on(causes: pl.DataFrame, upstream: str, ranks: set[int]) -> None:
    waits = causes.filter(pl.col("cause") == "waits")
    assert set(waits["rank"].to_list()) == ranks, causes.to_dicts()
    assert set(waits["upstream"].to_list()) == {upstream}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(PLANTED))
def test_the_planted_cause_is_named_first(runs, how: str) -> None:
    cause, job = PLANTED[how]

    flagged, causes = _first_causes(runs[job.name])

    assert flagged.height >= 1 and flagged["rank"][0] == job.slow_rank, flagged.to_dicts()
    first = causes.row(0, named=True)
    assert (first["rank"], first["cause"], first["order"]) == (job.slow_rank, cause, 1), causes.to_dicts()
    assert 0 < first["share"] <= 1 and first["price_ms"] > 0
    _assert_waits_on(causes, f"rank {job.slow_rank}", set(range(4)) - {job.slow_rank} - set(flagged["rank"]))


@pytest.mark.slow
def test_a_rank_beside_a_busy_process_is_contended(runs) -> None:
    analysis = analyse(runs[HOGGED.name])
    contention = rank_contention(analysis.probes.window)
    hogged = contention.filter(pl.col("rank") == HOG_RANK).row(0, named=True)
    if hogged["latency_ms"] <= hogged["latency_allowance_ms"]:
        # On a shared machine the scheduler moves other users' work off the hogged core onto the
        # other ranks' one: then the hogged rank waited no longer for a core than they did, and
        # there was no contention to find (the tool rightly names none).
        pytest.skip(f"no contention planted: rank {HOG_RANK} waited {hogged['latency_ms']:.1f} ms per dispatch, "
                    f"the other ranks {hogged['latency_reference_ms']:.1f} ms")  # fmt: skip
    flagged, causes = analysis.stragglers.flagged, analysis.causes
    if HOG_RANK not in flagged["rank"].to_list():
        judged = analysis.stragglers.ranks.filter(pl.col("rank") == HOG_RANK).row(0, named=True)
        if judged["pattern"] == "one-off":
            pytest.xfail(
                f"known gap: rank {HOG_RANK} (score {judged['score']:.2f}) slow in {judged['slow_steps']} of "
                f"{judged['steps']} steps, one-off, not flagged: a peer's time off a core in one step can "
                "outweigh it there (docs/performance.md, 'Straggler causes')"
            )

    assert flagged.height >= 1 and flagged["rank"][0] == HOG_RANK, flagged.to_dicts()
    first = causes.row(0, named=True)
    assert (first["rank"], first["cause"]) == (HOG_RANK, "contended"), causes.to_dicts()


@pytest.mark.slow
def test_a_slow_link_is_named_as_the_link_and_the_ranks_wait_on_it(runs) -> None:
    flagged, causes = _first_causes(runs[LINK.name])

    assert flagged.is_empty(), flagged.to_dicts()
    first = causes.row(0, named=True)
    assert (first["subject"], first["link"], first["cause"]) == ("link", "1-2", "link"), causes.to_dicts()
    _assert_waits_on(causes, "link 1-2", {0, 1, 2, 3})


@pytest.mark.slow
def test_every_capture_carries_probes_for_every_rank(runs) -> None:
    for path in runs.values():
        probes = analyse(path).probes

        assert probes is not None and probes.ranks == (0, 1, 2, 3)
        assert (probes.actions["cpu_ms"] <= probes.actions["wall_ms"] + 0.5).all()
        assert probes.actions["runq_ms"].is_not_null().all()
