"""``tracekit diff`` on real 4-rank gloo captures of the example job: planted changes named and priced.

Every capture is made once per module, one at a time (A/B needs a quiet machine), and shared by the
tests, which only read them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from diff.diff_runs import JOBS, SLOW_LINK, SLOW_RANK, SLOW_W_MS, SLOW_W_RANK
from stragglers.straggler_runs import record_all

import tracekit
from tracekit.present.diff import headline, host_accounts
from tracekit.run_diff import RunDiff


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every capture of ``JOBS`` by name."""
    return record_all(tmp_path_factory.mktemp("diff"), list(JOBS), parallel=1)  # type: ignore[arg-type]


def _diff(runs: dict[str, Path], base: str, new: str) -> RunDiff:
    return tracekit.diff(runs[base], runs[new])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", "diff", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_slow_rank_is_named_first_and_explains_the_change(runs) -> None:
    result = _diff(runs, "1f1b-base", "1f1b-slow-rank")
    top = result.explanation.rows.row(0, named=True)
    change = result.step_change
    assert change.beyond_noise and change.change_ms > 0
    assert (top["level"], top["rank"]) == ("rank", SLOW_RANK)
    assert abs(top["saving_ms"] - change.change_ms) <= 0.15 * change.change_ms, (top, change)
    assert headline(result).startswith("NEW is") and f"rank {SLOW_RANK} explains" in headline(result)


@pytest.mark.slow
def test_a_slow_link_is_named_first(runs) -> None:
    result = _diff(runs, "1f1b-base", "1f1b-slow-link")
    top = result.explanation.rows.row(0, named=True)
    assert result.step_change.beyond_noise
    assert (top["level"], top["rank_a"], top["rank_b"]) == ("link", *SLOW_LINK), top


@pytest.mark.slow
def test_a_slower_w_with_slack_is_priced_below_its_own_change(runs) -> None:
    result = _diff(runs, "zbv-base", "zbv-slow-w")
    explained = result.explanation.rows
    w = explained.filter((pl.col("rank") == SLOW_W_RANK) & (pl.col("kind") == "W"))
    own, saving = w["own_change_ms"].sum(), w["saving_ms"].sum()
    others = explained.filter((pl.col("rank") != SLOW_W_RANK) & (pl.col("kind") == "W") & (pl.col("level") == "group"))
    # The command line gives the same rows, however noisy the pair. (Its Markdown lists only the five
    # largest changes: on a machine loaded many times over, the links' and other ranks' noise can
    # outgrow these.)
    out = _cli(str(runs["zbv-base"]), str(runs["zbv-slow-w"]), "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = {row["name"]: row for row in json.loads(out.stdout)["explained"]}
    for name in w["name"]:
        assert rows[name]["own_change_ms"] == pytest.approx(w.filter(pl.col("name") == name)["own_change_ms"][0])
    moved = others.group_by("rank").agg(pl.col("own_change_ms").sum())["own_change_ms"]
    drift = moved.median() or 0.0
    planted = 16 * SLOW_W_MS
    if moved.abs().max() > 0.5 * planted:  # type: ignore[operator]
        # The other ranks' W were not changed: they are the pair's control. Where one of them moved by
        # more than half the planted change, so may the slowed rank's by noise alone, and the pair
        # cannot resolve it. Quiet, with 2 ms a W planted, they moved up to 13 ms a step; at 0.5 ms
        # a W (8 ms a step) a quiet CI run saw rank 0's 5.4 ms beside a 2.6 ms median drift. With both
        # cores contended the control ranks' W moved 8 to 76 ms a step (load 9 to 17).
        pytest.xfail(f"the other ranks' W moved {moved.min():+.1f} to {moved.max():+.1f} ms per step between "
                     f"the captures, past half the planted {planted:g}")  # fmt: skip
    # Each of the rank's 16 W per step (8 micro-batches, stages 0 and 7) sleeps SLOW_W_MS more: 32 ms of
    # its own time per step, at least half of it seen beyond the noise each op keeps and the other
    # ranks' drift (quiet: 34 and 36 ms).
    assert own - drift >= 0.5 * planted, (own, drift, w, others)
    # Some of them are on the step's critical path (the W that ends it among them); the others fill the
    # waits the capture holds. The price is what the replay with A's W durations saves: over five quiet
    # pairs of captures, 40% to 67% of the own change (two on earlier trees: 26% and 29%; at 0.5 ms a W
    # with both cores busy, 3% to 30%). The ideal ZB-V schedule with this job's action costs (0.2 to
    # 0.6 ms, each base capture's own) would charge 82% to 86% of it: the run's waits are slack the
    # ideal lacks.
    assert 0 < saving <= 0.8 * own, w


@pytest.mark.slow
def test_two_clean_captures_show_no_change_beyond_noise_and_pass_the_gate(runs) -> None:
    out = _cli(str(runs["1f1b-base"]), str(runs["1f1b-clean"]), "--fail-over", "10")
    assert out.returncode == 0, out.stdout + out.stderr
    if not out.stdout.startswith("no change beyond noise"):
        # Two clean captures agree only on a host as busy in both: with other work starting or
        # ending between them, a 35 ms step was 13 ms slower (a benchmark beside the suite, load 4
        # to 5), and a 99.5 ms step 38.4 ms faster against a band of 36.6 ms (two CPU hogs and the
        # suite, load 4 to 5.4). The diff lays such a change on the host where the ranks' wait for
        # a core accounts for it (``tracekit.changes.host``).
        result = tracekit.diff(runs["1f1b-base"], runs["1f1b-clean"])
        if host_accounts(result):
            assert "the host's, not the job's" in out.stdout.splitlines()[0]
            return
        host, steps = result.host, result.step_change
        partly = host is not None and host.change_ms * steps.change_ms > 0
        if partly and abs(host.change_ms) >= 0.25 * abs(steps.change_ms):  # type: ignore[union-attr]
            # The main thread's wait is a part of what a busy host costs a step (gloo's transfer
            # threads wait too, unseen): two hogs beside one capture cost 26.8 ms a step, of which
            # the main thread's wait showed 8.8.
            pytest.xfail(f"the host kept the ranks off a core {host.change_ms:+.1f} ms a step longer in the "
                         f"second capture, the step {steps.change_ms:+.1f} ms: partly the host's")  # fmt: skip
    assert out.stdout.startswith("no change beyond noise"), out.stdout
    assert "what explains the change" not in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("new", ["1f1b-slow-rank", "1f1b-slow-link"])
def test_the_planted_case_fails_the_gate_with_one_line(runs, new: str) -> None:
    out = _cli(str(runs["1f1b-base"]), str(runs[new]), "--fail-over", "10", "--format", "json")
    assert out.returncode == 1, out.stderr
    payload = json.loads(out.stdout)
    assert payload["gate"]["failed"] is True
    lines = [line for line in out.stderr.splitlines() if line.startswith("tracekit diff:")]
    assert len(lines) == 1 and "regression" in lines[0] and "explains" in lines[0], out.stderr
    assert payload["headline"].startswith("NEW is")


@pytest.mark.slow
def test_different_schedules_are_refused_in_one_line_and_allowed_on_request(runs) -> None:
    refused = _cli(str(runs["1f1b-base"]), str(runs["zbv-base"]))
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "schedule 1f1b vs zbv" in refused.stderr, refused.stderr
    allowed = _cli(str(runs["1f1b-base"]), str(runs["zbv-base"]), "--allow-different", "--format", "json")
    assert allowed.returncode == 0, allowed.stderr
    payload = json.loads(allowed.stdout)
    assert payload["comparison"]["key"] == ["stage", "kind"]
    assert "compared per stage and kind" in allowed.stderr
    new_kinds = {row["name"] for row in payload["work"] if row["change"] == "new"}
    assert {"I", "W"} <= new_kinds  # ZB-V splits the backward that 1F1B runs whole
