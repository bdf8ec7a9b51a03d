"""Built-in models and clusters, from public sources, as the field values of ``spec``'s dataclasses.

Models (``--model``):

* ``deepseek-v3-671b``: DeepSeek-V3 technical report (arXiv 2412.19437), section 4.2 and the
  released ``config.json`` (huggingface.co/deepseek-ai/DeepSeek-V3): 61 layers of which the
  first 3 are dense, hidden 7168, 128 heads with MLA (query compression 1536, key/value
  compression 512, per-head dimension 128 plus a 64-dimensional decoupled RoPE key, value
  dimension 128), 256 routed experts and 1 shared expert per MoE layer, 8 routed experts per
  token on at most 4 nodes, expert intermediate size 2048, dense FFN 18432, vocabulary 129280:
  671B parameters in total, 37B activated per token.
* ``llama3-70b``: "The Llama 3 Herd of Models" (arXiv 2407.21783), table 3: 80 layers, hidden
  8192, 64 heads with 8 key/value heads, FFN 28672, vocabulary 128256; dense, 70.6B parameters.

Clusters (``--cluster GPU-COUNT``, e.g. ``h800-2048``, ``h100-1024``): 8 GPUs per node, 80 GB of
HBM (taken as 80 GiB). H800: NVLink 160 GB/s and InfiniBand 50 GB/s per GPU, as DeepSeek-V3
section 3.2.2 gives them; H100 SXM: NVLink 450 GB/s per direction (NVIDIA's 900 GB/s
bidirectional) and a 400 Gb/s (50 GB/s) InfiniBand NIC per GPU. Both have the H100 SXM's dense
peaks, 989 TFLOP/s in BF16 and 1979 in FP8 (NVIDIA H100 datasheet; the H800 differs in
interconnect only); the achievable share is the spec's ``mfu`` (default 40%), an assumption the
report states.
"""

from __future__ import annotations

from typing import Any


def mla_attention_params(
    hidden: int, heads: int, q_rank: int, kv_rank: int, nope_dim: int, rope_dim: int, v_dim: int
) -> int:
    """Parameters of one multi-head latent attention block (DeepSeek-V2, arXiv 2405.04434, section 2.1)."""
    query = hidden * q_rank + q_rank * heads * (nope_dim + rope_dim)
    key_value = hidden * (kv_rank + rope_dim) + kv_rank * heads * (nope_dim + v_dim)
    output = heads * v_dim * hidden
    return query + key_value + output


MODELS: dict[str, dict[str, Any]] = {
    "deepseek-v3-671b": {
        "name": "deepseek-v3-671b",
        "layers": 61,
        "hidden": 7168,
        "heads": 128,
        "head_dim": 128 + 64,  # query/key: 128 per head plus the 64-dimensional decoupled RoPE part
        "v_head_dim": 128,
        "attention_params": mla_attention_params(7168, 128, 1536, 512, 128, 64, 128),
        "ffn": 18432,
        "vocab": 129280,
        "experts": 256,
        "experts_per_token": 8,
        "shared_experts": 1,
        "expert_ffn": 2048,
        "dense_layers": 3,
        "routing_max_nodes": 4,
    },
    "llama3-70b": {
        "name": "llama3-70b",
        "layers": 80,
        "hidden": 8192,
        "heads": 64,
        "kv_heads": 8,
        "ffn": 28672,
        "vocab": 128256,
    },
}
"""Model presets by name: ModelSpec fields."""

_GPUS: dict[str, dict[str, Any]] = {
    "h800": {"intra_node_gbps": 160.0, "inter_node_gbps": 50.0},
    "h100": {"intra_node_gbps": 450.0, "inter_node_gbps": 50.0},
}
_HOPPER = {"gpus_per_node": 8, "gpu_memory_gib": 80.0, "peak_bf16_tflops": 989.0, "peak_fp8_tflops": 1979.0}


CLUSTER_GPUS: tuple[str, ...] = tuple(_GPUS)
"""GPU names a cluster preset may start with."""


def cluster_preset(name: str) -> dict[str, Any] | None:
    """ClusterSpec fields of ``GPU-COUNT`` (``h800-2048``); None when ``name`` is not of that form."""
    gpu, _, count = name.partition("-")
    if gpu not in _GPUS or not count.isdigit() or int(count) < 1:
        return None
    return {"name": name, "gpus": int(count), **_HOPPER, **_GPUS[gpu]}
