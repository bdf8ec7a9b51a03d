"""Sweeps at equal model cost, the DualPipe-vs-1F1B comparison, and the GPU-hours arithmetic."""

from __future__ import annotations

import pytest

from tracekit.schedule.model import ScheduleError
from tracekit.schedule.registry import generate
from tracekit.schedule.sweep import ShareCosts, StepEconomics, compare_to_baseline, share_costs, sweep


def test_share_costs_split_a_ranks_share_over_its_stages() -> None:
    share = ShareCosts(f=2.0, b=4.0, w=1.0, fb=6.0, comm=0.5)

    v_costs = share_costs(generate("zbv", 4, 8), share)
    dualpipe_costs = share_costs(generate("dualpipe", 4, 8), share)

    assert v_costs.forward == (1.0,) * 8 and v_costs.overlapped == (3.0,) * 8 and v_costs.comm == 0.5
    assert dualpipe_costs.forward == (2.0,) * 8  # DualPipe's 2P stage ids are two copies, not a split


def test_dualpipe_against_1f1b_at_p8_m16() -> None:
    # Unit costs, no overlap gain: 1F1B idles (P-1)(F+B+W) = 21 of 69, DualPipe (P/2-1)(F&B+B-3W) = 6 of 54.
    frame, skipped = sweep(["1f1b", "dualpipe"], [8], [16], ShareCosts(1.0, 1.0, 1.0))

    rows = {row["schedule"]: row for row in frame.to_dicts()}

    assert skipped == ()
    assert rows["1f1b"]["makespan"] == 69.0 and rows["1f1b"]["utilization"] == pytest.approx(48 / 69)
    assert rows["dualpipe"]["makespan"] == 54.0 and rows["dualpipe"]["utilization"] == pytest.approx(48 / 54)
    assert rows["dualpipe"]["param_copies"] == 2 and rows["dualpipe"]["peak_activations"] == 9.0


def test_gpu_hours_recovered_per_million_tokens() -> None:
    frame, _ = sweep(["1f1b", "dualpipe"], [8], [16], ShareCosts(1.0, 1.0, 1.0))
    economics = StepEconomics(step_time_s=6.9, tokens_per_step=2_000_000, gpus=8)

    rows = {row["schedule"]: row for row in compare_to_baseline(frame, "1f1b", economics).to_dicts()}

    # 1F1B: 8 GPUs x 6.9 s / 3600 / 2 Mtok; DualPipe's step is 54/69 of it: 5.4 s.
    assert rows["1f1b"]["gpu_hours_per_mtok"] == pytest.approx(8 * 6.9 / 3600 / 2)
    assert rows["dualpipe"]["gpu_hours_per_mtok"] == pytest.approx(8 * 5.4 / 3600 / 2)
    assert rows["dualpipe"]["gpu_hours_recovered_per_mtok"] == pytest.approx(8 * 1.5 / 3600 / 2)
    assert rows["dualpipe"]["speedup_vs_baseline"] == pytest.approx(69 / 54)


def test_impossible_combinations_are_reported_not_dropped() -> None:
    frame, skipped = sweep(["dualpipe"], [4, 8], [8], ShareCosts(1.0, 1.0, 1.0))

    assert frame["pp"].to_list() == [4]
    assert len(skipped) == 1 and "pp=8" in skipped[0]


def test_bad_economics_are_refused() -> None:
    with pytest.raises(ScheduleError):
        StepEconomics(step_time_s=0.0, tokens_per_step=1, gpus=1)
