"""The planner's recommendations: the issue's DeepSeek-V3 and dense-70B settings, ties, and infeasible requests."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.planner import candidates
from tracekit.planner.plan import ALTERNATIVES_SCHEMA, plan, rank_order
from tracekit.planner.spec import DUALPIPE_FAMILY
from tracekit.present.plan import payload, reasons

from .specs import small_spec


def test_deepseek_v3_setting_lands_on_the_dualpipe_family(deepseek_plan) -> None:
    rec = deepseek_plan.recommendation

    assert rec is not None and rec["schedule"] in DUALPIPE_FAMILY
    assert (rec["pp"], rec["microbatches"]) == (16, 120)
    # the paper's premise: cross-node all-to-all makes compute : communication about 1:1
    assert deepseek_plan.compute_to_a2a == pytest.approx(1.0, abs=0.5)


def test_deepseek_report_states_the_2x_parameter_cost_and_why_it_is_affordable(deepseek_plan) -> None:
    copy_reason = reasons(deepseek_plan)[-1]

    assert deepseek_plan.recommendation["param_copies"] == 2
    assert "second parameter copy costs 12.0 GiB per GPU" in copy_reason
    assert "affordable here" in copy_reason and "routed experts spread over ep=64" in copy_reason


def test_dualpipe_family_hides_the_all_to_all_the_others_expose(deepseek_plan) -> None:
    rows = {row["schedule"]: row for row in deepseek_plan.alternatives.iter_rows(named=True)}

    assert rows["dualpipe"]["exposed_a2a_ms"] < rows["1f1b"]["exposed_a2a_ms"] / 4
    assert rows["dualpipe"]["step_ms"] < rows["zbv"]["step_ms"] < rows["1f1b"]["step_ms"]
    assert rows["1f1b"]["extra_gpu_hours_per_mtok"] > 0


def test_dense_70b_at_pp8_does_not_get_dualpipe(llama_plan) -> None:
    rec = llama_plan.recommendation
    dualpipe = llama_plan.alternatives.filter(pl.col("schedule") == "dualpipe").row(0, named=True)

    assert rec is not None and rec["schedule"] != "dualpipe" and rec["pp"] == 8
    assert not dualpipe["fits"] and dualpipe["note"].startswith("needs ")
    assert "DualPipe does not fit" in reasons(llama_plan)[-1]
    assert "no expert parallelism to thin it" in reasons(llama_plan)[-1]


def test_second_copy_is_a_smaller_share_of_memory_for_the_moe_model(deepseek_plan, llama_plan) -> None:
    moe, dense = deepseek_plan.second_copy, llama_plan.second_copy

    assert moe.share_of_memory < dense.share_of_memory / 3
    assert f"({moe.share_of_memory:.0%} of 80 GiB)" in reasons(deepseek_plan)[-1]
    assert f"({dense.share_of_memory:.0%} of 80 GiB)" in reasons(llama_plan)[-1]


def test_alternatives_follow_the_schema_recommendation_first(deepseek_plan) -> None:
    frame = deepseek_plan.alternatives

    assert dict(frame.schema) == ALTERNATIVES_SCHEMA
    assert frame.row(0, named=True) == deepseek_plan.recommendation
    assert frame["extra_gpu_hours_per_mtok"][0] == 0.0
    fitting = frame.filter(pl.col("fits"))["step_ms"].to_list()
    assert fitting[1:] == sorted(fitting[1:])


def test_nothing_fits_gives_reasons_not_a_crash() -> None:
    spec = small_spec(cluster={"gpu_memory_gib": 8.0}, sequence_length=8192)

    result = plan(spec)

    assert result.recommendation is None
    assert reasons(result)[0].startswith("No pipeline strategy fits small")
    assert "needs" in reasons(result)[1] and 'recompute = "full"' in reasons(result)[1]
    assert result.alternatives["fits"].any() is False
    assert payload(result)["recommendation"] is None


def test_nothing_runs_gives_the_divisibility_reasons() -> None:
    result = plan(small_spec(global_batch=33))

    assert result.recommendation is None and result.alternatives.is_empty()
    assert any("global batch 33 is not a multiple" in reason for reason in reasons(result))


def _row(schedule: str, step_ms: float, copies: int = 1, headroom: float = 10.0, fits: bool = True) -> dict:
    return {
        "schedule": schedule,
        "step_ms": step_ms,
        "param_copies": copies,
        "headroom_gib": headroom,
        "fits": fits,
    }


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # within 1% of the fastest: fewer copies win
        ([_row("dualpipe", 100.0, copies=2), _row("dualpipev", 100.9)], ["dualpipev", "dualpipe"]),
        # beyond 1%: the fastest wins despite its second copy
        ([_row("dualpipe", 100.0, copies=2), _row("dualpipev", 101.1)], ["dualpipe", "dualpipev"]),
        # a tie on copies goes to headroom; rows that do not fit come last however fast
        (
            [
                _row("zbv", 100.5, headroom=5.0),
                _row("zb-h2", 100.0, headroom=1.0),
                _row("1f1b", 50.0, fits=False),
            ],
            ["zbv", "zb-h2", "1f1b"],
        ),
    ],
)
def test_rank_order_breaks_ties_by_memory(rows: list[dict], expected: list[str]) -> None:
    assert [rows[i]["schedule"] for i in rank_order(rows)] == expected


@settings(max_examples=15, deadline=None)
@given(
    pp=st.sampled_from([None, 2, 4, 8]),
    global_batch=st.sampled_from([16, 32, 48, 64, 96]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    memory=st.floats(4.0, 80.0),
)
def test_any_small_request_gets_a_plan_or_reasons(
    pp, global_batch: int, recompute: str, memory: float
) -> None:
    spec = small_spec(
        cluster={"gpu_memory_gib": memory}, pp=pp, global_batch=global_batch, recompute=recompute
    )

    result = plan(spec)

    if result.recommendation is None:
        assert reasons(result)[0].startswith("No pipeline strategy fits")
        assert not result.alternatives["fits"].any()
    else:
        assert result.recommendation["fits"] and result.recommendation["headroom_gib"] >= 0
        assert result.alternatives.height + result.rejected.height >= 1
    assert (result.alternatives["bubble_fraction"] >= 0).all()
    assert (result.alternatives["lost_fraction"] >= result.alternatives["bubble_fraction"] - 1e-9).all()


def test_extrapolated_figures_match_a_full_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = small_spec(pp=4, global_batch=384)  # M = 48 = 12 pp, 384 cells at v = 2
    monkeypatch.setattr(candidates, "SIMULATION_BUDGET", 100)
    sampled = plan(spec).alternatives.sort("schedule")
    monkeypatch.setattr(candidates, "SIMULATION_BUDGET", 10**9)
    exact = plan(spec).alternatives.sort("schedule")

    assert set(sampled["simulated_at"]) == {"8,16"} and set(exact["simulated_at"]) == {"48"}
    for column in ("step_ms", "bubble_fraction", "lost_fraction", "memory_gib"):
        assert sampled[column].to_list() == pytest.approx(exact[column].to_list(), rel=0.01, abs=1e-3), column
