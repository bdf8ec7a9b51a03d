"""Straggler scoring on simulated runs (exact ground truth) and on the artifact's op-tables."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from whatif.simulated_runs import data_parallel_actions, simulated_actions

from tracekit.present.stragglers import describe, heading, notes, stragglers_payload
from tracekit.run_analysis import AnalysisConfig, RunAnalysis, analyse
from tracekit.schedule.registry import generate
from tracekit.stragglers.scoring import StragglerConfig, score_stragglers
from tracekit.analysis.work import stage_work_frame
from tracekit.whatif.pipeline import pipeline_case

SCHEDULES = [("1f1b", 4), ("zbv", 4), ("dualpipev", 4), ("1f1b", 2)]


def equal_work(name: str, pp: int) -> pl.DataFrame:
    """Every stage of the schedule holding the same parameters and layers."""
    stages = generate(name, pp, 8).num_stages
    return stage_work_frame(
        [{"stage": s, "params": 1000, "embedding_params": 0, "layers": 2} for s in range(stages)]
    )


def _case(name: str, pp: int, **kwargs):
    case, _ = pipeline_case(simulated_actions(name, pp=pp, steps=3, **kwargs), name)
    return case


@pytest.mark.parametrize(("name", "pp"), SCHEDULES)
def test_a_slow_rank_is_named_first_and_alone_on_every_rank(name: str, pp: int) -> None:
    for slow_rank in range(pp):
        case = _case(name, pp, slow_rank=slow_rank, factor=1.6)

        result = score_stragglers(case, stage_work=equal_work(name, pp))

        flagged = result.flagged
        assert flagged["rank"].to_list() == [slow_rank], (slow_rank, result.ranks.to_dicts())
        row = flagged.row(0, named=True)
        assert row["pattern"] == "persistent"
        # F and I slowed by 1.6, W not: the kind with most excess scores 1 / 1.6, or above in a pair with W.
        assert 1 / 1.6 - 1e-9 <= row["kind_score"] < 0.75
        assert row["saving_ms"] > 0 and row["step_ms_without"] == pytest.approx(
            row["step_ms"] - row["saving_ms"]
        )
        assert result.unjudged.is_empty()


@pytest.mark.parametrize(("name", "pp"), SCHEDULES)
def test_a_run_without_straggler_names_none_and_judges_every_rank(name: str, pp: int) -> None:
    result = score_stragglers(_case(name, pp), stage_work=equal_work(name, pp))

    assert result.flagged.is_empty()
    assert result.ranks["score"].to_list() == pytest.approx([1.0] * pp)
    assert sorted(result.ranks["rank"].to_list()) == list(range(pp))


def test_ranks_without_peers_or_recorded_work_are_listed_with_the_reason() -> None:
    result = score_stragglers(_case("1f1b", 4, slow_rank=3, factor=1.6))

    assert result.unjudged["rank"].to_list() == [0, 3]
    assert all("records no per-stage work" in reason for reason in result.unjudged["reason"].to_list())
    assert sorted(result.ranks["rank"].to_list()) == [1, 2]  # peers of each other
    assert result.flagged.is_empty()
    history = result.scores.filter(pl.col("rank") == 3)
    assert (history["reference"] == "history").all() and history["score"].is_null().all()


@pytest.mark.parametrize(("name", "slow_rank"), [("1f1b", 0), ("1f1b", 3), ("zbv", 0), ("dualpipev", 2)])
def test_with_replicas_every_rank_has_peers_and_a_first_or_last_stage_straggler_is_named(
    name: str, slow_rank: int
) -> None:
    # No stage work recorded: without replicas the first and last stage could not be judged at all.
    actions = data_parallel_actions(name, slow_replica=1, slow_rank=slow_rank, factor=1.6, steps=3)
    case, _ = pipeline_case(actions, name)

    result = score_stragglers(case)

    assert result.unjudged.is_empty()
    assert set(result.scores["reference"].to_list()) == {"peers"}
    assert set(result.scores["references"].to_list()) == {1}  # the same stage in the other replica
    assert result.flagged["rank"].to_list() == [4 + slow_rank]
    assert result.flagged.row(0, named=True)["reference"] == "peers"


def test_stragglers_payload_names_each_ranks_replica() -> None:
    actions = data_parallel_actions("1f1b", slow_replica=1, slow_rank=0, factor=2.0, steps=3)

    payload = stragglers_payload(RunAnalysis.of_actions(actions))

    (straggler,) = payload["stragglers"]
    assert (straggler["rank"], straggler["replica"]) == (4, 1) and payload["replicas"] == 2
    assert straggler["summary"].startswith("rank 4 (replica 1) runs ")
    assert {(row["rank"], row["replica"]) for row in payload["ranks"]} == {(r, r // 4) for r in range(8)}


def test_a_missing_rank_is_listed_as_unjudged() -> None:
    result = score_stragglers(_case("1f1b", 4), stage_work=equal_work("1f1b", 4), world_size=5)

    assert result.unjudged.to_dicts() == [
        {"rank": 4, "reason": "no trace: the rank is missing from the capture"}
    ]


def test_expected_cost_scales_with_each_stages_parameters() -> None:
    # Stage 3 holds twice the parameters and costs twice as much: it is not a straggler.
    work = stage_work_frame(
        [
            {"stage": s, "params": 2000 if s == 3 else 1000, "embedding_params": 0, "layers": 2}
            for s in range(4)
        ]
    )
    heavy = _case("1f1b", 4, slow_rank=3, factor=2.0)

    as_heavy = score_stragglers(heavy, stage_work=work)
    as_equal = score_stragglers(heavy, stage_work=equal_work("1f1b", 4))

    assert as_heavy.flagged.is_empty()
    assert as_heavy.ranks.filter(pl.col("rank") == 3)["kind_score"].item() == pytest.approx(1.0)
    assert as_equal.flagged["rank"].to_list() == [3]


def test_embedding_parameters_do_not_count_as_compute() -> None:
    work = stage_work_frame(
        [{"stage": 0, "params": 5000, "embedding_params": 4000, "layers": 2}]
        + [{"stage": s, "params": 1000, "embedding_params": 0, "layers": 2} for s in (1, 2, 3)]
    )

    result = score_stragglers(_case("1f1b", 4), stage_work=work)

    assert work["compute_params"].to_list() == [1000] * 4
    assert result.flagged.is_empty()


def test_slowness_in_one_step_of_three_is_one_off_not_a_straggler() -> None:
    case = _case("1f1b", 4, slow_rank=1, factor=2.0, slow_steps=[1])

    result = score_stragglers(case, stage_work=equal_work("1f1b", 4))

    row = result.ranks.filter(pl.col("rank") == 1).row(0, named=True)
    assert (row["slow_steps"], row["steps"], row["pattern"], row["flagged"]) == (1, 3, "one-off", False)


def test_one_straggler_per_rank_however_many_kinds_are_slow() -> None:
    result = score_stragglers(_case("zbv", 4, slow_rank=2, factor=2.0), stage_work=equal_work("zbv", 4))

    slow_kinds = result.scores.filter((pl.col("rank") == 2) & (pl.col("score") < 0.75))
    assert slow_kinds.height >= 2
    assert result.flagged.height == 1
    assert (
        heading("run", result)
        == "run: 1 straggling rank (score below 0.75 and costing at least 5% of the step)"
    )


def test_sentence_says_how_much_slower_and_what_the_step_would_take() -> None:
    result = score_stragglers(_case("1f1b", 2, slow_rank=0, factor=1.5), stage_work=equal_work("1f1b", 2))
    row = result.flagged.row(0, named=True)

    slower = {"F": "50%", "B": "33%"}[row["kind"]]  # F 2 -> 3 ms; B (I + W) 3 -> 4 ms: the same excess
    assert describe(row) == (
        f"rank 0 runs {row['kind']} {slower} slower than its expected cost; at expected speed the step would take "
        f"{row['step_ms_without']:.0f} ms instead of {row['step_ms']:.0f} ms "
        f"(\u2212{row['saving_ms'] / row['step_ms']:.0%})"
    )


def test_payload_holds_the_documented_keys_most_costly_first() -> None:
    actions = simulated_actions("1f1b", pp=4, steps=3, slow_rank=2, factor=2.0)
    analysis = RunAnalysis.of_actions(actions, stage_work=equal_work("1f1b", 4))

    payload = stragglers_payload(analysis)

    assert [s["rank"] for s in payload["stragglers"]] == [2]
    assert set(payload["stragglers"][0]) >= {
        "rank", "kind", "score", "reference", "saving_ms", "step_ms", "step_ms_without",
    }  # fmt: skip
    assert payload["stragglers"][0]["reference"] == "peers"
    assert payload["unjudged"] == []
    savings = [r["saving_ms"] for r in payload["ranks"]]
    assert savings[0] == max(savings)


def test_a_long_last_stage_is_no_straggler_when_its_replicas_are_its_peers(shared: Path) -> None:
    result = analyse(shared / "traces" / "whatif-optable-ST" / "trace-ST.parquet").stragglers

    assert result.flagged.is_empty()
    assert set(result.scores["reference"].to_list()) == {"peers"}  # dp_size 2: each worker's replica
    assert set(result.scores["references"].to_list()) == {1}


def test_notes_state_the_thresholds_the_scores_were_made_with() -> None:
    config = StragglerConfig(threshold=0.6, min_saving_share=0.1, persistent_share=0.25)

    written = notes(config)

    assert any("below 0.6" in note and "at least 10% of the step" in note for note in written)
    assert any("more than 25% of the steps" in note for note in written)
    assert not any(" 5%" in note or "half" in note for note in written)


def test_payload_notes_follow_the_analysis_config() -> None:
    config = AnalysisConfig(stragglers=StragglerConfig(min_saving_share=0.2))
    analysis = RunAnalysis.of_actions(simulated_actions("1f1b", slow_rank=2, factor=2.0), config=config)

    payload = stragglers_payload(analysis)

    assert payload["min_saving_share"] == 0.2
    assert any("at least 20% of the step" in note for note in payload["notes"])


@pytest.mark.parametrize("field", ["threshold", "min_saving_share", "persistent_share"])
def test_config_refuses_out_of_range_values(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        StragglerConfig(**{field: 1.5})
