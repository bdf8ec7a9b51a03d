"""The planner's inputs: a cluster, a model and a training configuration, from TOML, presets and flags.

Each part is a frozen dataclass validated in ``__post_init__``; a bad value raises ``PlannerError``
(a ``TracekitError``: one line on the command line). ``load_spec`` merges, in order of precedence,
command-line overrides over the TOML file over the named presets (``presets.py``). Units: bandwidth
in GB/s (10^9 bytes per second, one direction, per GPU), memory in GiB, throughput in TFLOP/s.
Not for: costs or memory figures (``layers``, ``costs``, ``memory``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.compat import tomllib
from tracekit.errors import TracekitError
from tracekit.planner.presets import CLUSTER_GPUS, MODELS, TRAINING, cluster_preset
from tracekit.schedule.registry import GENERATORS

SCHEDULES: tuple[str, ...] = tuple(name for name, generator in GENERATORS.items() if generator.planned)
"""Schedules the planner compares: the simulator's registry names it plans with."""

DUALPIPE_FAMILY: frozenset[str] = frozenset(
    name for name, generator in GENERATORS.items() if generator.pairs_forward_backward
)
"""Schedules that overlap a forward with a backward chunk (DeepSeek-V3, section 3.2.1)."""

PRECISIONS: tuple[str, ...] = ("bf16", "fp8")
RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")


class PlannerError(TracekitError):
    """A plan request tracekit cannot answer: a bad spec, an unknown preset, a missing field."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise PlannerError(message)


def _positive(owner: object, *names: str) -> None:
    for name in names:
        value = getattr(owner, name)
        _check(
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0,
            f"{type(owner).__name__}.{name} must be a number > 0, got {value!r}",
        )


MIN_HIDDEN = 64
"""The smallest hidden size planned for (GPT-2 small has 768; the planner's costs assume matrix
multiplies large enough to run near the cluster's achievable rate)."""

PHYSICAL_LIMITS: dict[str, float] = {
    "intra_node_gbps": 10_000.0,
    "inter_node_gbps": 10_000.0,
    "gpu_memory_gib": 4_096.0,
    "peak_bf16_tflops": 50_000.0,
    "peak_fp8_tflops": 100_000.0,
    "achievable_tflops": 100_000.0,
}
"""Per-GPU upper bounds no GPU comes near (an H200: 989 dense BF16 TFLOP/s, 141 GB, NVLink 450 GB/s
a direction): a value past one is a unit slip (bits for bytes, a cluster total for one GPU)."""


def _within(owner: object, limits: dict[str, float]) -> None:
    for name, limit in limits.items():
        value = getattr(owner, name)
        _check(
            value is None or value <= limit,
            f"{type(owner).__name__}.{name} = {value!r} is beyond any GPU built (at most {limit:g}): "
            "give the value for one GPU, in the unit its name says",
        )


def _integers(owner: object, *names: str, minimum: int = 1) -> None:
    for name in names:
        value = getattr(owner, name)
        _check(
            isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
            f"{type(owner).__name__}.{name} must be an integer >= {minimum}, got {value!r}",
        )


@dataclass(frozen=True)
class ClusterSpec:
    """The GPUs a job runs on and how fast they compute and talk."""

    gpus: int
    """GPUs of the whole job."""
    gpus_per_node: int
    """GPUs sharing one node's NVLink domain."""
    intra_node_gbps: float
    """Achievable NVLink bandwidth per GPU within a node, GB/s."""
    inter_node_gbps: float
    """Achievable network (InfiniBand) bandwidth per GPU across nodes, GB/s."""
    gpu_memory_gib: float
    """Memory of one GPU, GiB."""
    name: str = "custom"
    """Label shown in reports (a preset's name, or "custom")."""
    peak_bf16_tflops: float | None = None
    """Dense BF16 peak of one GPU, TFLOP/s."""
    peak_fp8_tflops: float | None = None
    """Dense FP8 peak of one GPU, TFLOP/s."""
    mfu: float = 0.4
    """Fraction of the peak (at the training precision) the model's matrix multiplies achieve."""
    achievable_tflops: float | None = None
    """Achievable TFLOP/s per GPU; None means ``mfu`` x the peak at the training precision."""

    def __post_init__(self) -> None:
        _integers(self, "gpus", "gpus_per_node")
        _positive(self, "intra_node_gbps", "inter_node_gbps", "gpu_memory_gib")
        _check(0 < self.mfu <= 1, f"ClusterSpec.mfu must be in (0, 1], got {self.mfu!r}")
        for name in ("peak_bf16_tflops", "peak_fp8_tflops", "achievable_tflops"):
            if getattr(self, name) is not None:
                _positive(self, name)
        _check(
            self.gpus_per_node <= self.gpus and self.gpus % self.gpus_per_node == 0,
            f"ClusterSpec: gpus ({self.gpus}) must be a whole number of nodes of gpus_per_node "
            f"({self.gpus_per_node})",
        )
        _within(self, PHYSICAL_LIMITS)

    def throughput_tflops(self, precision: str) -> float:
        """Achievable TFLOP/s per GPU when the matrix multiplies run at ``precision``."""
        if self.achievable_tflops is not None:
            return self.achievable_tflops
        peak = self.peak_fp8_tflops if precision == "fp8" else self.peak_bf16_tflops
        assert peak is not None, "PlanSpec checks that a peak or achievable_tflops is given"
        return self.mfu * peak


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, dense or mixture-of-experts."""

    layers: int
    """Transformer layers."""
    hidden: int
    """Hidden size."""
    heads: int
    """Attention (query) heads."""
    ffn: int
    """Intermediate size of a dense layer's gated (SwiGLU) FFN."""
    vocab: int
    """Vocabulary size (input embedding and output head, untied)."""
    name: str = "custom"
    """Label shown in reports (a preset's name, or "custom")."""
    kv_heads: int | None = None
    """Key/value heads (grouped-query attention); None means ``heads``."""
    head_dim: int | None = None
    """Per-head query/key dimension; None means hidden / heads."""
    v_head_dim: int | None = None
    """Per-head value dimension; None means ``head_dim``."""
    attention_params: int | None = None
    """Parameters of one layer's attention block; None computes the GQA projections (MLA passes its own)."""
    experts: int = 0
    """Routed experts per MoE layer; 0 means a dense model."""
    experts_per_token: int = 0
    """Routed experts each token is sent to."""
    shared_experts: int = 0
    """Shared experts per MoE layer, which every token visits on its own GPU."""
    expert_ffn: int = 0
    """Intermediate size of one (SwiGLU) expert."""
    dense_layers: int = 0
    """Leading layers of an MoE model that are dense (DeepSeek-V3: 3)."""
    routing_max_nodes: int | None = None
    """Node-limited routing: a token reaches at most this many nodes, crossing the network once per node."""

    def __post_init__(self) -> None:
        _integers(self, "layers", "hidden", "heads", "ffn", "vocab")
        if self.head_dim is None:
            _check(
                self.hidden % self.heads == 0,
                f"ModelSpec: hidden ({self.hidden}) must be a multiple of heads ({self.heads}), "
                "or give head_dim",
            )
        _check(
            self.hidden >= MIN_HIDDEN,
            f"ModelSpec: hidden ({self.hidden}) is below {MIN_HIDDEN}: no transformer that is trained with "
            "pipeline parallelism is that small, and its step would be launch overhead, which the "
            "planner does not model",
        )
        if self.kv_heads is not None:
            _check(
                self.kv_heads <= self.heads,
                f"ModelSpec: kv_heads ({self.kv_heads}) exceeds heads ({self.heads})",
            )
        _integers(
            self, "experts", "experts_per_token", "shared_experts", "expert_ffn", "dense_layers", minimum=0
        )
        for name in ("kv_heads", "head_dim", "v_head_dim", "attention_params", "routing_max_nodes"):
            if getattr(self, name) is not None:
                _integers(self, name)
        if self.kv_heads is not None:
            _check(
                self.heads % self.kv_heads == 0,
                f"ModelSpec: heads ({self.heads}) must be a multiple of kv_heads",
            )
        if self.experts:
            _check(
                0 < self.experts_per_token <= self.experts and self.expert_ffn > 0,
                f"ModelSpec: an MoE model needs 0 < experts_per_token <= experts ({self.experts}) and expert_ffn > 0",
            )
            _check(
                self.dense_layers < self.layers, f"ModelSpec: dense_layers must be < layers ({self.layers})"
            )
        else:
            _check(
                self.experts_per_token == self.shared_experts == self.expert_ffn == self.dense_layers == 0,
                "ModelSpec: experts_per_token, shared_experts, expert_ffn and dense_layers need experts > 0",
            )

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.experts > 0


@dataclass(frozen=True)
class TrainingSpec:
    """How the model is trained: batch, parallelism, precision, recomputation and state sizes."""

    sequence_length: int
    """Tokens per sequence."""
    global_batch: int
    """Sequences per optimizer step, over all data-parallel replicas."""
    micro_batch_size: int = 1
    """Sequences per micro-batch."""
    ep: int = 1
    """Expert-parallel degree, carved out of the data-parallel ranks (1 for a dense model)."""
    pp: int | None = None
    """Pipeline depth to plan for; None enumerates every feasible depth."""
    schedules: tuple[str, ...] = SCHEDULES
    """Schedules to compare."""
    precision: str = "bf16"
    """Precision of the matrix multiplies: bf16 or fp8 (picks the peak the cluster's mfu applies to)."""
    recompute: str = "none"
    """Activation recomputation: none, selective (attention core, norms, SwiGLU output) or full (whole layers)."""
    activation_bytes: float = 2.0
    """Bytes per saved activation element (2 for BF16; DeepSeek-V3 caches many in FP8)."""
    param_bytes: float = 2.0
    """Bytes per parameter of the working (BF16) weights every pipeline rank holds."""
    grad_bytes: float = 4.0
    """Bytes per parameter of the gradient buffer (FP32 accumulation)."""
    optimizer_bytes: float = 12.0
    """Bytes per parameter of optimizer state (FP32 master, Adam m and v), sharded over data parallel (ZeRO-1)."""
    dispatch_bytes: float = 2.0
    """Bytes per element of the dispatch all-to-all and of the combine's backward (1 when sent in FP8)."""
    combine_bytes: float = 2.0
    """Bytes per element of the combine all-to-all and of the dispatch's backward."""
    reserved_gib: float = 5.0
    """Memory per GPU taken before the model: CUDA context, communication buffers, fragmentation, GiB."""

    def __post_init__(self) -> None:
        _integers(self, "sequence_length", "global_batch", "micro_batch_size", "ep")
        _check(
            self.micro_batch_size <= self.global_batch,
            f"TrainingSpec: micro_batch_size ({self.micro_batch_size}) exceeds global_batch "
            f"({self.global_batch})",
        )
        if self.pp is not None:
            _integers(self, "pp")
        _positive(self, "activation_bytes", "param_bytes", "grad_bytes", "optimizer_bytes")
        _positive(self, "dispatch_bytes", "combine_bytes")
        _check(self.reserved_gib >= 0, f"TrainingSpec.reserved_gib must be >= 0, got {self.reserved_gib!r}")
        _check(
            self.precision in PRECISIONS,
            f"TrainingSpec.precision must be one of {PRECISIONS}, got {self.precision!r}",
        )
        _check(
            self.recompute in RECOMPUTE,
            f"TrainingSpec.recompute must be one of {RECOMPUTE}, got {self.recompute!r}",
        )
        object.__setattr__(self, "schedules", tuple(self.schedules))
        unknown = [name for name in self.schedules if name not in SCHEDULES]
        _check(
            not unknown and bool(self.schedules),
            f"TrainingSpec.schedules: unknown {unknown}; known: {SCHEDULES}",
        )

    @property
    def tokens_per_step(self) -> int:
        """Training tokens per optimizer step."""
        return self.global_batch * self.sequence_length


@dataclass(frozen=True)
class PlanSpec:
    """Everything a plan is computed from."""

    cluster: ClusterSpec
    model: ModelSpec
    training: TrainingSpec

    def __post_init__(self) -> None:
        model, training, cluster = self.model, self.training, self.cluster
        if model.is_moe:
            _check(
                model.experts % training.ep == 0,
                f"ep ({training.ep}) must divide the experts ({model.experts})",
            )
        else:
            _check(
                training.ep == 1,
                f"{model.name} is dense: expert parallelism (ep = {training.ep}) does not apply",
            )
        _check(training.ep <= cluster.gpus, f"ep ({training.ep}) exceeds the cluster's {cluster.gpus} GPUs")
        if training.pp is not None:
            _check(
                training.pp <= cluster.gpus, f"pp ({training.pp}) exceeds the cluster's {cluster.gpus} GPUs"
            )
        peak = cluster.peak_fp8_tflops if training.precision == "fp8" else cluster.peak_bf16_tflops
        _check(
            cluster.achievable_tflops is not None or peak is not None,
            f"[cluster]: give achievable_tflops, or peak_{training.precision}_tflops for the mfu to apply to",
        )


_SECTIONS: dict[str, type] = {"cluster": ClusterSpec, "model": ModelSpec, "training": TrainingSpec}


def field_names(section: str) -> tuple[str, ...]:
    """The keys a TOML section (cluster, model, training) accepts."""
    return tuple(f.name for f in dataclasses.fields(_SECTIONS[section]))


def _build(section: str, values: dict[str, Any]) -> Any:
    cls = _SECTIONS[section]
    known = set(field_names(section))
    unknown = sorted(set(values) - known)
    if unknown:
        raise PlannerError(
            f"[{section}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    required = [
        f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in values
    ]
    if required:
        raise PlannerError(
            f"[{section}]: missing {', '.join(required)} (set it in the spec's [{section}] table, "
            f"with a preset, or on the command line)"
        )
    try:
        return cls(**values)
    except TypeError as error:  # a TOML value of the wrong shape, e.g. a table where a number goes
        raise PlannerError(f"[{section}]: {error}") from None


def read_toml(path: Path) -> dict[str, dict[str, Any]]:
    """The spec file's tables; PlannerError on a missing file, bad TOML or unknown tables."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except FileNotFoundError:
        raise PlannerError("spec file not found", path) from None
    except tomllib.TOMLDecodeError as error:
        raise PlannerError(f"not valid TOML: {error}", path) from None
    unknown = sorted(set(document) - set(_SECTIONS))
    if unknown:
        raise PlannerError(
            f"unknown table(s) {', '.join(unknown)}; expected [cluster], [model], [training]", path
        )
    for section, table in document.items():
        if not isinstance(table, dict):
            raise PlannerError(f"{section} must be a table ([{section}])", path)
    return document


def build_spec(
    toml: dict[str, dict[str, Any]],
    presets: dict[str, dict[str, Any]],
    overrides: dict[str, dict[str, Any]],
) -> PlanSpec:
    """Merge presets < TOML < overrides per section (None overrides are ignored) into a PlanSpec."""
    merged: dict[str, Any] = {}
    for section in _SECTIONS:
        values = dict(presets.get(section, {}))
        values.update({k: v for k, v in toml.get(section, {}).items() if k != "preset"})
        values.update({k: v for k, v in overrides.get(section, {}).items() if v is not None})
        merged[section] = _build(section, values)
    return PlanSpec(**merged)


def preset_tables(model: str | None, cluster: str | None) -> dict[str, dict[str, Any]]:
    """The field values of the named presets, by section; PlannerError for an unknown name."""
    tables: dict[str, dict[str, Any]] = {}
    if model is not None:
        if model not in MODELS:
            raise PlannerError(f"unknown model preset {model!r}; known: {', '.join(MODELS)}")
        tables["model"] = dict(MODELS[model])
        tables["training"] = dict(TRAINING.get(model, {}))
    if cluster is not None:
        fields = cluster_preset(cluster)
        if fields is None:
            raise PlannerError(
                f"unknown cluster preset {cluster!r}; expected GPU-COUNT (e.g. h800-2048) with GPU one of "
                f"{', '.join(CLUSTER_GPUS)}"
            )
        tables["cluster"] = fields
    return tables


def load_spec(
    path: Path | None,
    model: str | None = None,
    cluster: str | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> PlanSpec:
    """The spec from a TOML file (optional), presets named by flags or by the file's ``preset`` keys, and overrides.

    A preset named on the command line wins over one named in the file.
    """
    toml = read_toml(path) if path is not None else {}
    model = model or toml.get("model", {}).get("preset")
    cluster = cluster or toml.get("cluster", {}).get("preset")
    return build_spec(toml, preset_tables(model, cluster), overrides or {})
