"""Per-layer figures and the balanced cut of layers into stages."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracekit.planner.layers import layer_figures, partition

from .specs import small_spec


def _brute_force_best(weights: list[float], groups: int) -> float:
    n = len(weights)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), groups - 1):
        bounds = (0, *cuts, n)
        best = min(best, max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


@given(st.data())
def test_partition_is_contiguous_complete_and_minimizes_the_heaviest_run(data: st.DataObject) -> None:
    weights = data.draw(st.lists(st.integers(1, 50).map(float), min_size=1, max_size=9))
    groups = data.draw(st.integers(1, len(weights)))

    runs = partition(weights, groups)

    assert len(runs) == groups and all(len(run) > 0 for run in runs)
    assert [layer for run in runs for layer in run] == list(range(len(weights)))
    assert max(sum(weights[i] for i in run) for run in runs) == _brute_force_best(weights, groups)


def test_deepseek_moe_layer_figures(deepseek) -> None:
    figures = layer_figures(deepseek.model, deepseek.training, deepseek.cluster, layer=10)
    tokens = 4096

    # activated: MLA 187.1M + 9 experts x 44.04M + router 256 x 7168
    assert figures.matmul_flops == pytest.approx(2 * (187_105_280 + 9 * 44_040_192 + 256 * 7168) * tokens)
    assert figures.expert_params == 256 * 44_040_192
    # node-limited routing: 4 nodes x 7/8 remote, FP8 dispatch + BF16 combine, 7168 per token
    assert figures.a2a_inter_bytes == pytest.approx(tokens * 4 * 7 / 8 * 7168 * (1 + 2))


def test_dense_layers_of_an_moe_model_send_nothing(deepseek) -> None:
    figures = layer_figures(deepseek.model, deepseek.training, deepseek.cluster, layer=0)

    assert figures.a2a_inter_bytes == figures.a2a_intra_bytes == figures.expert_params == 0


def test_expert_parallelism_inside_one_node_stays_on_nvlink(deepseek) -> None:
    training = type(deepseek.training)(**(vars(deepseek.training) | {"ep": 8}))

    figures = layer_figures(deepseek.model, training, deepseek.cluster, layer=10)

    assert figures.a2a_inter_bytes == 0 and figures.a2a_intra_bytes > 0


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_recomputation_trades_saved_activations_for_backward_flops(recompute: str) -> None:
    spec = small_spec(recompute=recompute)
    baseline = small_spec()

    figures = layer_figures(spec.model, spec.training, spec.cluster, 0)
    kept = layer_figures(baseline.model, baseline.training, baseline.cluster, 0)

    if recompute == "none":
        assert figures.recompute_flops == 0 and figures.activation_bytes == kept.activation_bytes
    else:
        assert figures.recompute_flops > 0 and figures.activation_bytes < kept.activation_bytes
    if recompute == "full":
        assert figures.recompute_flops == figures.matmul_flops + figures.attention_flops
        assert figures.activation_bytes == 2048 * 2048 * 2  # the layer's input, BF16
