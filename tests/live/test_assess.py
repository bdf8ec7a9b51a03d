"""The live assessment scores an interval with the offline analysis's own functions."""

from __future__ import annotations

import polars as pl
import pytest
from live_samples import SAMPLE_1F1B, slowed, summaries_of

from tracekit.analysis.realized import REALIZED_SCHEMA
from tracekit.errors import TracekitError
from tracekit.live.assess import RANK_SCHEMA, LiveConfig, assess_interval, flagged_stragglers, usable_steps
from tracekit.live.summaries import parse_summary, realized_frame
from tracekit.run_analysis import analyse


def test_summaries_lay_out_the_realized_actions_they_were_cut_from(sample_actions: pl.DataFrame) -> None:
    frame = realized_frame(summaries_of(sample_actions))
    assert dict(frame.schema) == REALIZED_SCHEMA
    assert frame.drop("source").equals(sample_actions.drop("source").sort("rank", "start_ns"))


def test_live_scores_equal_the_offline_scores_of_the_same_actions(sample_actions: pl.DataFrame) -> None:
    live = assess_interval(0, summaries_of(sample_actions), {0, 1, 2, 3}, LiveConfig())
    offline = analyse(SAMPLE_1F1B).stragglers.scores
    assert live.scores.equals(offline)
    assert dict(live.ranks.schema) == RANK_SCHEMA
    assert live.ranks["rank"].to_list() == [0, 1, 2, 3]


def test_a_slowed_middle_rank_is_flagged_with_its_stage_kind_and_price(sample_actions: pl.DataFrame) -> None:
    summaries = summaries_of(slowed(sample_actions, rank=1, kind="F", factor=6.0))
    assessment = assess_interval(0, summaries, {0, 1, 2, 3}, LiveConfig())
    alerts = flagged_stragglers(assessment)
    assert [(a["rank"], a["stage"], a["kind"]) for a in alerts] == [(1, 1, "F")]
    assert alerts[0]["slower_pct"] > 300 and alerts[0]["saving_ms"] > 0
    # one figure: the alert prices the whole rank, as the interval's table and `tracekit stragglers` do
    table_saving = assessment.ranks.filter(pl.col("rank") == 1)["saving_ms"][0]
    assert alerts[0]["saving_ms"] == round(table_saving, 3)
    assert table_saving == assessment.ranks["saving_ms"].max()


def test_steps_missing_a_rank_or_profiled_are_not_judged(sample_actions: pl.DataFrame) -> None:
    summaries = summaries_of(sample_actions)
    without = [s for s in summaries if not (s.rank == 2 and s.step == 0)]
    assert usable_steps(without, {0, 1, 2, 3}) == [1]
    profiled = [s if s.step == 1 else s.__class__(**{**s.__dict__, "profiled": True}) for s in summaries]
    assert usable_steps(profiled, {0, 1, 2, 3}) == [1]


@pytest.mark.parametrize(
    ("change", "fault"),
    [
        ({"v": 2}, "version"),
        ({"a": [[0, "X", 0, 0, 1, 0]]}, "bad action"),
        ({"a": [[0, "F", 0, 5, 1, 0]]}, "ends before it starts"),
        ({"r": 4}, "outside world size"),
        ({"s": -1}, "step"),
        ({"pg": []}, "bad pipeline group"),
        ({"pg": [0, "1"]}, "pipeline group rank"),
        ({"sc": 3}, "bad schedule class"),
    ],
)
def test_a_malformed_summary_is_refused_with_its_fault(change: dict, fault: str) -> None:
    message = {"t": "step", "v": 1, "r": 0, "w": 4, "h": "h", "p": 1, "s": 3, "t0": 10, "d": 5, "c": 0,
               "clk": "cpu", "cap": 0, "x": 0, "a": [[0, "F", 0, 0, 1, 0]]}  # fmt: skip
    assert parse_summary(message).step == 3
    with pytest.raises(ValueError, match=fault):
        parse_summary({**message, **change})


def test_live_config_rejects_an_interval_of_one_step() -> None:
    with pytest.raises(ValueError, match="at least 2 steps"):
        LiveConfig(interval_steps=1)


def _two_replicas(actions: pl.DataFrame, grouped: bool) -> list:
    """The sample's summaries twice, as replicas 0 (ranks 0-3) and 1 (ranks 4-7) of one pipeline."""
    summaries = []
    for replica in (0, 1):
        ranks = tuple(range(4 * replica, 4 * replica + 4))
        for summary in summaries_of(actions.with_columns(pl.col("rank") + 4 * replica)):
            summaries.append(
                summary.__class__(
                    **{**summary.__dict__, "world_size": 8, "pipeline_group": ranks if grouped else None}
                )
            )
    return summaries


def test_live_summaries_naming_pipeline_groups_judge_each_rank_against_the_other_replica(
    sample_actions: pl.DataFrame,
) -> None:
    clean = _two_replicas(sample_actions, grouped=True)
    slow = _two_replicas(slowed(sample_actions, rank=0, kind="F", factor=6.0), grouped=True)
    summaries = [s for s in clean if s.rank < 4] + [s for s in slow if s.rank >= 4]

    assessment = assess_interval(0, summaries, set(range(8)), LiveConfig())

    assert realized_frame(summaries)["replica"].unique().sort().to_list() == [0, 1]
    assert set(assessment.scores["reference"].to_list()) == {"peers"}  # first and last stages too
    assert [(a["rank"], a["stage"], a["kind"]) for a in flagged_stragglers(assessment)] == [
        (4, 0, "F")
    ]


def test_live_replicas_without_pipeline_groups_cannot_be_told_apart(sample_actions: pl.DataFrame) -> None:
    summaries = _two_replicas(sample_actions, grouped=False)

    with pytest.raises(TracekitError, match="runs 2 times in step 0"):
        assess_interval(0, summaries, set(range(8)), LiveConfig())

