"""Straggler scoring on simulated runs (exact ground truth) and on the artifact's op-tables."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from whatif.simulated_runs import simulated_actions

from tracekit.stragglers.report import stragglers_payload
from tracekit.stragglers.scoring import StragglerConfig, describe, score_stragglers
from tracekit.whatif.attribution import what_if
from tracekit.whatif.inputs import load_case
from tracekit.whatif.pipeline import pipeline_case


@pytest.mark.parametrize(("name", "slow_rank"), [("1f1b", 1), ("1f1b", 2), ("zbv", 3), ("dualpipev", 2)])
def test_the_slow_rank_is_named_first_and_only_it(name: str, slow_rank: int) -> None:
    case, _ = pipeline_case(simulated_actions(name, slow_rank=slow_rank, factor=1.6, steps=3), name)

    scores = score_stragglers(case)

    flagged = scores.filter(pl.col("flagged"))
    assert flagged["rank"].unique().to_list() == [slow_rank]
    forward = flagged.filter(pl.col("kind") == "F").row(0, named=True)
    assert forward["score"] == pytest.approx(1 / 1.6)  # W is not slowed, so B and pairs score between
    assert (flagged["pattern"] == "persistent").all()
    assert flagged["saving_ms"].to_list() == sorted(flagged["saving_ms"].to_list(), reverse=True)


def test_a_run_without_straggler_names_none() -> None:
    case, _ = pipeline_case(simulated_actions("dualpipev", steps=3), "dualpipev")

    scores = score_stragglers(case)

    judged = scores.filter(pl.col("peers") > 0)
    assert not scores["flagged"].any()
    assert judged["score"].to_list() == pytest.approx([1.0] * judged.height)
    assert scores.filter(pl.col("peers") == 0)["score"].is_null().all()
    assert set(scores.filter(pl.col("peers") == 0)["work"].to_list()) <= {
        "first",
        "last",
        "first/last",
        "last/first",
    }


def test_slowness_in_one_step_of_three_is_one_off_not_a_straggler() -> None:
    case, _ = pipeline_case(
        simulated_actions("1f1b", slow_rank=1, factor=2.0, steps=3, slow_steps=[1]), "1f1b"
    )

    row = score_stragglers(case).filter((pl.col("rank") == 1) & (pl.col("kind") == "F")).row(0, named=True)

    assert (row["slow_steps"], row["steps"], row["pattern"], row["flagged"]) == (1, 3, "one-off", False)


def test_sentence_says_how_much_slower_and_what_the_step_would_take() -> None:
    case, _ = pipeline_case(simulated_actions("1f1b", slow_rank=2, factor=1.5, steps=2), "1f1b")
    realized = what_if(case).realized_ms.mean()

    row = score_stragglers(case).row(0, named=True)

    assert describe(row) == (
        f"rank 2 runs {row['kind']} 50% slower than its peers; at peer speed the step would take "
        f"{row['step_ms_at_peer_speed']:.0f} ms instead of {realized:.0f} ms "
        f"({-row['saving_ms'] / row['step_ms']:+.0%})"
    )


def test_a_long_last_stage_is_no_straggler_when_its_replicas_are_its_peers(shared: Path) -> None:
    loaded = load_case(shared / "traces" / "whatif-optable-ST" / "trace-ST.parquet")

    scores = score_stragglers(loaded.case)

    assert not scores["flagged"].any()
    assert set(scores["peers"].to_list()) == {1}  # dp_size 2: each worker's replica
    assert next(iter(what_if(loaded.case).by_stage)) == 3  # the what-if names the stage instead


def test_payload_lists_flagged_rows_most_harmful_first_with_a_summary() -> None:
    case, _ = pipeline_case(simulated_actions("1f1b", slow_rank=2, factor=2.0), "1f1b")
    config = StragglerConfig()

    payload = stragglers_payload(score_stragglers(case, config), config, clock=None)

    assert [(s["rank"], s["kind"]) for s in payload["stragglers"]][:1] == [
        (2, payload["stragglers"][0]["kind"])
    ]
    assert {s["rank"] for s in payload["stragglers"]} == {2}
    assert all(s["summary"].startswith("rank 2 runs ") for s in payload["stragglers"])
    assert len(payload["scores"]) == 8


@pytest.mark.parametrize("field", ["threshold", "min_saving_share", "persistent_share"])
def test_config_refuses_out_of_range_values(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        StragglerConfig(**{field: 1.5})
