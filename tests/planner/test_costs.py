"""Per-action times: FLOPs over throughput, exposed and overlapped all-to-all, stage positions."""

from __future__ import annotations

import pytest

from tracekit.planner.costs import GroupTimes, engine_costs, layout, overlapped_ms, p2p_ms, stage_positions
from tracekit.schedule.registry import generate

from .specs import small_spec


def test_forward_time_is_flops_over_achievable_throughput() -> None:
    spec = small_spec(pp=4)
    cut = layout(spec, 4)
    figures, times = cut.figures[1], cut.times[1]
    flops_per_ms = 0.4 * 989e12 / 1e3

    assert times.forward == pytest.approx((figures.matmul_flops + figures.attention_flops) / flops_per_ms)
    assert times.backward_weight == pytest.approx(figures.matmul_flops / flops_per_ms)
    assert times.backward_input == pytest.approx(
        (figures.matmul_flops + 2 * figures.attention_flops) / flops_per_ms
    )


def test_layout_covers_every_layer_once_and_puts_the_head_last() -> None:
    spec = small_spec()

    cut = layout(spec, 6)

    assert [layer for group in cut.groups for layer in group] == list(range(16))
    assert cut.figures[-1].params > cut.figures[1].params * len(cut.groups[-1]) / len(cut.groups[1]) * 0.99


def test_dualpipe_stages_of_both_directions_share_their_layer_groups() -> None:
    assert stage_positions(generate("dualpipe", 4, 8)) == (0, 1, 2, 3, 0, 1, 2, 3)
    assert stage_positions(generate("zbv", 4, 8)) == tuple(range(8))


@pytest.mark.parametrize(
    ("compute", "a2a", "expected"),
    [(1.0, 0.2, 1.0 + 2.0 + 1.0), (1.0, 3.0, 6.0)],  # comm hidden behind compute / compute behind comm
)
def test_overlapped_pair_costs_the_longer_of_compute_and_all_to_all(
    compute: float, a2a: float, expected: float
) -> None:
    times = GroupTimes(forward=compute, backward_input=2 * compute, backward_weight=compute, a2a=a2a)

    assert overlapped_ms(times, times) == pytest.approx(expected)


def test_actions_alone_expose_their_all_to_all(deepseek) -> None:
    schedule = generate("dualpipe", 16, 32)
    cut = layout(deepseek, 16, hides_a2a=True)

    costs = engine_costs(deepseek, schedule, cut)
    middle = cut.times[5]

    assert costs.forward[5] == pytest.approx(middle.forward + middle.a2a)
    assert costs.backward_weight[5] == pytest.approx(middle.backward_weight)
    assert costs.overlapped[5] == pytest.approx(
        middle.forward + middle.backward_input + middle.backward_weight
    )


def test_pipeline_hops_cross_nodes_only_when_a_replica_fills_nodes() -> None:
    spec = small_spec()  # 32 GPUs, 8 per node

    assert p2p_ms(spec, 4) == pytest.approx(2048 * 2048 * 2 / 50e9 * 1e3)  # 8 GPUs per stage: across nodes
    assert p2p_ms(spec, 8) == pytest.approx(2048 * 2048 * 2 / 450e9 * 1e3)  # 4 GPUs per stage: inside a node
