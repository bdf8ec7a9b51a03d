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

Each model preset also carries its published training setting (``TRAINING``: sequence length,
batch, expert parallelism, precision, recomputation, state sizes), with the source's sections.

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

TRAINING: dict[str, dict[str, Any]] = {
    # DeepSeek-V3 technical report (arXiv 2412.19437); docs/examples/deepseek-v3.toml gives the same.
    "deepseek-v3-671b": {
        "sequence_length": 4096,  # section 4.2
        "global_batch": 15360,  # section 4.2: the batch size the schedule ramps up to, in sequences
        "micro_batch_size": 1,  # not published; 1 gives >= 2 x PP micro-batches, as DualPipe needs
        "ep": 64,  # section 3.2: 64-way expert parallelism spanning 8 nodes
        "precision": "fp8",  # section 3.3: FP8 mixed-precision GEMMs
        "recompute": "selective",  # section 3.2.3: RMSNorm and MLA up-projections recomputed
        "activation_bytes": 1,  # section 3.3.3: activations cached in FP8
        "optimizer_bytes": 8,  # section 3.2.3: FP32 master weights, BF16 AdamW moments
        "dispatch_bytes": 1,  # section 3.3.3: FP8 dispatch
        "combine_bytes": 2,  # section 3.3.3: BF16 combine
    },
    # "The Llama 3 Herd of Models" (arXiv 2407.21783); docs/examples/llama3-70b.toml gives the same.
    "llama3-70b": {
        "sequence_length": 8192,  # table 4
        "global_batch": 2048,  # 16M tokens per step (table 4)
        "micro_batch_size": 1,
        "recompute": "full",  # not published for 70B; without it 8192-token sequences do not fit 80 GB
    },
}
"""Each model preset's published training setting: TrainingSpec fields (the pipeline depth is left to plan).

DeepSeek-V3 trained at PP16 (section 3.2); the preset leaves ``pp`` out so that ``tracekit plan``
compares depths, and ``--pp 16`` (or docs/examples/deepseek-v3.toml) pins the published one.
"""

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
