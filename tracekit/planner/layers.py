"""What one layer weighs and does per micro-batch: parameters, FLOPs, saved activations, all-to-all bytes.

Formulas (per micro-batch of T = micro-batch size x sequence tokens; h hidden, a heads, d and d_v
the per-head query/key and value dimensions, kv key/value heads, f the FFN size):

* Parameters: attention q/k/v/o projections (h·a·d + h·kv·(d + d_v) + a·d_v·h, or the model's
  own count for MLA); a SwiGLU FFN 3·h·f; an MoE layer's routed experts 3·h·f_e each (sharded
  over the expert-parallel group), its shared experts and its router (h per expert) replicated.
* Forward FLOPs: 2 per parameter a token passes through (activated parameters only: its k routed
  experts and the shared ones), plus the causal attention core a·T·s·(d + d_v) (QK^T and AV at
  2 FLOPs per multiply-add, halved by the causal mask; s the sequence length).
* Backward: the input gradient (I, Zero Bubble's B) repeats the matmul FLOPs and twice the attention
  core; the weight gradient (W) repeats the matmul FLOPs (Narayanan et al., arXiv 2104.04473, 3).
  Recomputation adds to I what it reruns: selective the attention core and the q/k/v projections
  (DeepSeek-V3 section 3.2.3 recomputes norms and MLA up-projections; Korthikanti et al.,
  arXiv 2205.05198, the core), full the whole forward.
* Saved activations, elements per token (Korthikanti et al., table 2, with flash attention so no
  s² term and no dropout masks): none keeps the norm and projection inputs, q, k, v and the
  attention output (2h + q + k + v + o), the FFN's 2h + 3f (input, norm input, gate, up, product),
  an MoE layer's 2h + (k + shared)(h + 3f_e); selective keeps only the projection inputs
  (h + o; h + 2f; h + (k + shared)(h + 2f_e)); full keeps the layer's input h.
* All-to-all (MoE layers): each token's k routed copies are dispatched and combined across the
  expert-parallel group, which spans ceil(ep / GPUs per node) nodes. A copy leaves the node with
  probability (nodes - 1) / nodes; with node-limited routing a token crosses the network once per
  node it reaches (at most ``routing_max_nodes``) and is forwarded inside the node over NVLink
  (DeepSeek-V3 section 3.2.2). The backward moves the same volumes the other way.

Not for: times (``costs``) or memory totals (``memory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracekit.planner.spec import ClusterSpec, ModelSpec, TrainingSpec


@dataclass(frozen=True)
class LayerFigures:
    """One layer (or the embedding or output head) for one micro-batch; sums stay figures."""

    params: float = 0.0
    """Parameters every pipeline rank holding the layer stores in full."""
    expert_params: float = 0.0
    """Routed-expert parameters, sharded over the expert-parallel group."""
    matmul_flops: float = 0.0
    """Forward FLOPs of the weight matrix multiplies."""
    attention_flops: float = 0.0
    """Forward FLOPs of the attention core (no weights)."""
    recompute_flops: float = 0.0
    """Forward FLOPs the backward reruns for recomputation."""
    activation_bytes: float = 0.0
    """Bytes saved from the forward for the backward."""
    a2a_inter_bytes: float = 0.0
    """Bytes one GPU sends across nodes in one direction's all-to-all pass (dispatch + combine)."""
    a2a_intra_bytes: float = 0.0
    """Bytes one GPU sends over NVLink in one direction's all-to-all pass (dispatch + combine)."""

    def __add__(self, other: LayerFigures) -> LayerFigures:
        return LayerFigures(*(a + b for a, b in zip(_values(self), _values(other))))


def _values(figures: LayerFigures) -> tuple[float, ...]:
    return (
        figures.params,
        figures.expert_params,
        figures.matmul_flops,
        figures.attention_flops,
        figures.recompute_flops,
        figures.activation_bytes,
        figures.a2a_inter_bytes,
        figures.a2a_intra_bytes,
    )


def attention_params(model: ModelSpec) -> int:
    """Parameters of one layer's attention block."""
    if model.attention_params is not None:
        return model.attention_params
    d, dv, kv = _head_dims(model)
    return model.hidden * (model.heads * d + kv * (d + dv) + model.heads * dv)


def _head_dims(model: ModelSpec) -> tuple[int, int, int]:
    d = model.head_dim or model.hidden // model.heads
    return d, model.v_head_dim or d, model.kv_heads or model.heads


def expert_params(model: ModelSpec) -> int:
    """Parameters of one (SwiGLU) expert."""
    return 3 * model.hidden * model.expert_ffn


def is_moe_layer(model: ModelSpec, layer: int) -> bool:
    """True when layer ``layer`` (0-based) is a mixture-of-experts layer."""
    return model.is_moe and layer >= model.dense_layers


def _layer_params(model: ModelSpec, layer: int) -> tuple[int, int, int]:
    """(replicated, routed-expert, activated-per-token) parameters of layer ``layer``."""
    attn = attention_params(model)
    if not is_moe_layer(model, layer):
        dense = attn + 3 * model.hidden * model.ffn
        return dense, 0, dense
    router = model.experts * model.hidden
    replicated = attn + model.shared_experts * expert_params(model) + router
    activated = attn + (model.experts_per_token + model.shared_experts) * expert_params(model) + router
    return replicated, model.experts * expert_params(model), activated


def layer_figures(model: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, layer: int) -> LayerFigures:
    """Parameters, FLOPs, activations and all-to-all bytes of layer ``layer`` for one micro-batch."""
    h = model.hidden
    tokens = training.micro_batch_size * training.sequence_length
    d, dv, kv = _head_dims(model)
    attn = attention_params(model)
    output_projection = model.heads * dv * h
    core = model.heads * tokens * training.sequence_length * (d + dv)
    qkvo = model.heads * d + kv * d + kv * dv + model.heads * dv
    replicated, routed, activated = _layer_params(model, layer)
    if is_moe_layer(model, layer):
        visited = model.experts_per_token + model.shared_experts
        saved = {
            "none": 2 * h + qkvo + 2 * h + visited * (h + 3 * model.expert_ffn),
            "selective": h + model.heads * dv + h + visited * (h + 2 * model.expert_ffn),
            "full": h,
        }[training.recompute]
        inter, intra = _a2a_bytes(model, training, cluster, tokens)
    else:
        saved = {
            "none": 2 * h + qkvo + 2 * h + 3 * model.ffn,
            "selective": h + model.heads * dv + h + 2 * model.ffn,
            "full": h,
        }[training.recompute]
        inter = intra = 0.0
    matmul = 2.0 * activated * tokens
    recompute = {
        "none": 0.0,
        "selective": core + 2.0 * (attn - output_projection) * tokens,
        "full": matmul + core,
    }[training.recompute]
    return LayerFigures(
        params=replicated,
        expert_params=routed,
        matmul_flops=matmul,
        attention_flops=core,
        recompute_flops=recompute,
        activation_bytes=saved * tokens * training.activation_bytes,
        a2a_inter_bytes=inter,
        a2a_intra_bytes=intra,
    )


def _a2a_bytes(
    model: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, tokens: int
) -> tuple[float, float]:
    """(cross-node, intra-node) bytes one GPU sends in a dispatch plus a combine, for ``tokens`` tokens."""
    ep, per_node = training.ep, cluster.gpus_per_node
    k = model.experts_per_token
    element_bytes = (training.dispatch_bytes + training.combine_bytes) * model.hidden * tokens
    nodes = math.ceil(ep / per_node)
    if nodes == 1:
        return 0.0, element_bytes * k * (ep - 1) / ep
    remote = (nodes - 1) / nodes
    crossings = min(k, model.routing_max_nodes) if model.routing_max_nodes is not None else k
    return element_bytes * crossings * remote, element_bytes * k * (per_node - 1) / per_node


def embedding_figures(model: ModelSpec) -> LayerFigures:
    """The input embedding: its parameters only (a lookup has no matmul FLOPs)."""
    return LayerFigures(params=model.vocab * model.hidden)


def head_figures(model: ModelSpec, training: TrainingSpec) -> LayerFigures:
    """The final norm and output projection onto the vocabulary, with its saved input."""
    tokens = training.micro_batch_size * training.sequence_length
    return LayerFigures(
        params=model.vocab * model.hidden,
        matmul_flops=2.0 * model.vocab * model.hidden * tokens,
        activation_bytes=model.hidden * tokens * training.activation_bytes,
    )


def total_params(model: ModelSpec) -> tuple[int, int]:
    """(all parameters, routed-expert parameters) of the model, embedding and head included."""
    per_layer = [_layer_params(model, layer) for layer in range(model.layers)]
    routed = sum(layer[1] for layer in per_layer)
    return 2 * model.vocab * model.hidden + sum(layer[0] for layer in per_layer) + routed, routed


def activated_params(model: ModelSpec) -> int:
    """Parameters one token passes through: all but the routed experts it is not sent to."""
    return 2 * model.vocab * model.hidden + sum(
        _layer_params(model, layer)[2] for layer in range(model.layers)
    )


def partition(weights: list[float], groups: int) -> list[range]:
    """Split ``weights`` into ``groups`` contiguous non-empty runs minimizing the heaviest run."""
    assert 1 <= groups <= len(weights), (groups, len(weights))
    prefix = [0.0]
    for weight in weights:
        prefix.append(prefix[-1] + weight)
    n = len(weights)
    # best[g][i]: lightest heaviest run splitting the first i weights into g runs; cut[g][i]: its last cut
    best = [[math.inf] * (n + 1) for _ in range(groups + 1)]
    cut = [[0] * (n + 1) for _ in range(groups + 1)]
    best[0][0] = 0.0
    for g in range(1, groups + 1):
        for i in range(g, n - (groups - g) + 1):
            for j in range(g - 1, i):
                value = max(best[g - 1][j], prefix[i] - prefix[j])
                if value < best[g][i]:
                    best[g][i], cut[g][i] = value, j
    runs: list[range] = []
    i = n
    for g in range(groups, 0, -1):
        runs.append(range(cut[g][i], i))
        i = cut[g][i]
    return runs[::-1]
