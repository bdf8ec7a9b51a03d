"""Real 4-rank (and 2-rank) gloo captures of the example job: planted stragglers named first, priced.

Every capture is made once per module (``runs``) and shared by the tests; the slow link once per
session (``slow_link_run``), shared with ``test_stragglers_causes``. Signal stands above
noise by design: the straggler sleeps 30 ms per forward and per backward of each stage module
(about ten times an action's compute), so results hold with both cores busy.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import polars as pl
import pytest
from stragglers.straggler_runs import SLOW_MS, Job, record_all

from tracekit.run_analysis import analyse
from tracekit.stragglers.links import slow_links
from tracekit.stragglers.scoring import Stragglers, score_stragglers
from tracekit.analysis.work import stage_work

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"

CLEAN_SAMPLES = ("1f1b", "gpipe", "zbv", "interleaved-1f1b", "dualpipev", "deepseek-dualpipe")
"""Sample runs without a planted straggler."""

PLANTED = [
    ("1f1b", 4, 1),
    ("1f1b", 4, 2),
    ("zbv", 4, 0),
    ("zbv", 4, 2),
    ("dualpipev", 4, 0),
    ("dualpipev", 4, 2),
    ("1f1b", 2, 1),
]
"""(schedule, ranks, straggler rank): two ranks of each 4-rank schedule (an end of the path, judged
against its expected cost, or the middle, against its peers; 1F1B's ends come from the 2-rank
pipeline, whose ranks are both ends), and a 2-rank pipeline. Every
rank of every schedule is priced by ``benchmarks/straggler_ab.py`` (docs/performance.md); here each
capture costs the suite seconds of both cores, so one per kind of reference and schedule."""

AB_CASES = [("1f1b", 4, 1), ("dualpipev", 4, 0)]
"""Cases whose predicted saving is checked against a clean capture made at the same time."""


def _reference(schedule: str, ranks: int, rank: int) -> str:
    """Peers for a rank whose stages are all in the middle of the path, else its expected cost."""
    ends = {0, ranks - 1} if schedule == "1f1b" else {0}  # a V schedule's rank 0 holds both ends
    return "expected" if rank in ends else "peers"


def _name(schedule: str, ranks: int, rank: int) -> str:
    return f"{schedule}-p{ranks}-r{rank}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every capture these tests read, by name; the A/B pairs captured one run at a time."""
    root = tmp_path_factory.mktemp("stragglers")
    pairs = []
    for schedule, ranks, rank in AB_CASES:
        pairs += [
            Job(f"{schedule}-p{ranks}-clean", schedule, ranks, small=True),
            Job(_name(schedule, ranks, rank), schedule, ranks, slow_rank=rank, small=True),
        ]
    # Alone, so that no other capture's work (its trace export above all) lands in their steps:
    # the A/B pairs, whose step times are compared. The slow link is the session's ``slow_link_run``.
    done = record_all(root, pairs, parallel=1)
    jobs = [
        Job(_name(s, p, r), s, p, slow_rank=r) for s, p, r in PLANTED if (s, p, r) not in AB_CASES
    ]
    jobs.append(Job("1f1b-p4-r2-short", "1f1b", 4, slow_rank=2, slow_ms=SLOW_MS / 3))
    return done | record_all(root, jobs)


def _score(path: Path) -> Stragglers:
    loaded = analyse(path)
    return score_stragglers(
        loaded.case, stage_work=stage_work(loaded.manifest, str(path)), world_size=loaded.manifest.world_size
    )


@pytest.mark.slow
@pytest.mark.parametrize(("schedule", "ranks", "rank"), PLANTED)
def test_a_planted_straggler_is_named_first_at_an_end_and_in_the_middle(runs, schedule: str, ranks: int, rank: int) -> None:
    result = _score(runs[_name(schedule, ranks, rank)])

    flagged = result.flagged
    assert flagged.height >= 1 and flagged["rank"][0] == rank, result.ranks.to_dicts()
    assert result.unjudged.is_empty()
    assert flagged["reference"][0] == _reference(schedule, ranks, rank)


@pytest.mark.slow
def test_the_price_grows_with_the_stragglers_delay(runs) -> None:
    short, long = (_score(runs[name]) for name in ("1f1b-p4-r2-short", "1f1b-p4-r2"))

    savings = [result.ranks.filter(pl.col("rank") == 2)["saving_ms"].item() for result in (short, long)]

    # 16 actions of rank 2 per step on the critical path, 20 ms more each: far above any noise here.
    assert savings[1] - savings[0] > 16 * (SLOW_MS - SLOW_MS / 3) / 2, savings
    assert short.flagged["rank"][0] == 2 and long.flagged["rank"][0] == 2


@pytest.mark.slow
@pytest.mark.parametrize(("schedule", "ranks", "rank"), AB_CASES)
def test_the_predicted_saving_matches_the_measured_difference(runs, schedule: str, ranks: int, rank: int) -> None:
    slow, clean = runs[_name(schedule, ranks, rank)], runs[f"{schedule}-p{ranks}-clean"]
    measured = statistics.median(analyse(slow).case.measured_ms()) - statistics.median(
        analyse(clean).case.measured_ms()
    )

    predicted = _score(slow).ranks.filter(pl.col("rank") == rank)["saving_ms"].item()

    # benchmarks/straggler_ab.py aims for 15% over more steps; two captured steps on a machine
    # others load too hold this looser bound (see the README's table for what it measures).
    assert predicted == pytest.approx(measured, rel=0.5), (predicted, measured)


@pytest.mark.slow
def test_a_slow_link_is_a_communication_straggler_not_a_compute_one(slow_link_run: Path) -> None:
    path = slow_link_run
    loaded = analyse(path)

    links = slow_links(loaded.actions, float(loaded.case.measured_ms().mean()))

    compute = _score(path).flagged
    flagged = links.filter("flagged")
    assert flagged.select("rank_a", "rank_b").rows() == [(1, 2)], links.to_dicts()
    # The link's slowness is not blamed on the ranks at its ends, and it is the costliest finding.
    # (A first or last stage judged by expected cost can still be flagged beside it: the expected
    # cost does not model the loss, a known limit in docs/stragglers.md.)
    assert not set(compute["rank"].to_list()) & {1, 2}, compute.to_dicts()
    assert flagged["saving_ms"][0] > max([0.0, *compute["saving_ms"].to_list()])


def test_sample_straggler_run_names_its_slow_rank_first() -> None:
    result = _score(SAMPLES / "dualpipev-straggler")  # recorded with --slow-rank 2 --slow-ms 5

    assert result.flagged.height >= 1 and result.flagged["rank"][0] == 2


@pytest.mark.parametrize("name", CLEAN_SAMPLES)
def test_sample_runs_without_straggler_name_none(name: str) -> None:
    path = SAMPLES / name
    loaded = analyse(path)

    result = _score(path)

    assert result.flagged.is_empty(), result.flagged.to_dicts()
    assert slow_links(loaded.actions, float(loaded.case.measured_ms().mean())).filter("flagged").is_empty()
