"""Per-rank memory and the cost of DualPipe's second parameter copy."""

from __future__ import annotations

import pytest

from tracekit.planner.costs import engine_costs, layout
from tracekit.planner.memory import rank_memory, second_copy
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.registry import generate

from .specs import small_spec


def _memory(spec, name: str, pp: int, microbatches: int):
    schedule = generate(name, pp, microbatches)
    cut = layout(spec, pp * schedule.stages_per_rank)
    peaks = (
        summarize(simulate(schedule, engine_costs(spec, schedule, cut))).ranks["peak_activations"].to_list()
    )
    return rank_memory(spec, schedule, cut, peaks)


def test_dualpipe_ranks_hold_two_groups_of_parameters() -> None:
    spec = small_spec(global_batch=64)

    single = _memory(spec, "1f1b", 4, 8)
    double = _memory(spec, "dualpipe", 4, 8)

    # rank 1 holds groups 1 and 2 under DualPipe, group 1 under 1F1B; the middle groups are equal
    assert double["params_gib"][1] == pytest.approx(2 * single["params_gib"][1])
    assert double["grads_gib"][1] == pytest.approx(2 * single["grads_gib"][1])


def test_memory_parts_add_up_and_headroom_is_what_is_left() -> None:
    spec = small_spec()

    memory = _memory(spec, "1f1b", 4, 8)

    parts = memory.select(
        "params_gib", "grads_gib", "optimizer_gib", "activations_gib", "reserved_gib"
    ).sum_horizontal()
    assert (parts - memory["total_gib"]).abs().max() < 1e-9
    assert (memory["headroom_gib"] + memory["total_gib"] == 80.0).all()
    # 1F1B: rank 0 holds P micro-batches in flight, the last rank one
    assert memory["activations_gib"][0] > memory["activations_gib"][3]


def test_second_copy_is_a_smaller_share_for_the_moe_model(deepseek, llama) -> None:
    moe = second_copy(deepseek, 16)
    dense = second_copy(llama, 8)

    assert moe.routed_fraction > 0.95 and dense.routed_fraction == 0
    assert moe.params_per_gpu < moe.params_per_gpu_without_ep / 10  # experts spread over ep=64
    assert dense.params_per_gpu == dense.params_per_gpu_without_ep
    assert moe.share_of_memory < 0.2
    assert dense.share_of_memory > 0.5
