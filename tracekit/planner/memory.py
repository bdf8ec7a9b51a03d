"""Per-rank memory of a candidate, and what DualPipe's second parameter copy costs a model.

Per pipeline rank, in GiB (2^30 bytes):

* parameters and gradients: every stage the rank runs holds its layer group's replicated
  parameters in full and its routed experts' 1/ep share, times ``param_bytes`` and ``grad_bytes``.
  DualPipe's rank r runs groups r and pp-1-r, so its ranks hold two copies of the model between
  them (``Schedule.param_copies``).
* optimizer state under ZeRO-1: sharded over the data-parallel ranks holding the same weights.
  Expert parallelism is carved out of data parallelism (dp = GPUs / pp; experts are replicated
  dp / ep times), so a rank's share is replicated / dp + (routed / ep) / (dp / ep), that is
  (replicated + routed) x ``optimizer_bytes`` / dp. The copies of a DualPipe rank
  keep their own shards (conservative: they could be sharded across the copies too).
* activations: the simulator's peak in-flight count (``metrics.peak_activations``, in units of one
  micro-batch through one rank's share of one copy) times the mean saved bytes of the rank's
  stages, times its stages per rank.
* ``reserved_gib`` for the CUDA context, communication buffers and fragmentation.

Not for: times (``costs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.planner.costs import Layout, stage_positions
from tracekit.planner.layers import total_params
from tracekit.planner.spec import PlanSpec
from tracekit.schedule.action import flatten
from tracekit.schedule.metrics import rank_bytes
from tracekit.schedule.model import Schedule

GIB = float(2**30)

MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "params_gib": pl.Float64(),
    "grads_gib": pl.Float64(),
    "optimizer_gib": pl.Float64(),
    "activations_gib": pl.Float64(),
    "reserved_gib": pl.Float64(),
    "total_gib": pl.Float64(),
    "headroom_gib": pl.Float64(),
}
"""One row per pipeline rank; headroom = GPU memory - total (negative: does not fit)."""


def rank_stages(schedule: Schedule) -> list[tuple[int, ...]]:
    """The stages each rank runs."""
    return [tuple(sorted({action.stage for action in flatten(steps)})) for steps in schedule.steps]




def rank_memory(
    spec: PlanSpec, schedule: Schedule, cut: Layout, peak_activations: list[float]
) -> pl.DataFrame:
    """Memory of every pipeline rank of ``schedule`` (MEMORY_SCHEMA)."""
    training = spec.training
    dp = spec.cluster.gpus // schedule.num_ranks
    positions = stage_positions(schedule)
    rows: dict[str, list] = {name: [] for name in MEMORY_SCHEMA}
    for rank, stages in enumerate(rank_stages(schedule)):
        figures = [cut.figures[positions[stage]] for stage in stages]
        held = sum(f.params + f.expert_params / training.ep for f in figures)
        sharded = sum(f.params + f.expert_params for f in figures) / dp
        saved = sum(f.activation_bytes for f in figures) / len(figures)
        values = (
            held * training.param_bytes / GIB,
            held * training.grad_bytes / GIB,
            sharded * training.optimizer_bytes / GIB,
            peak_activations[rank] * saved * schedule.stages_per_rank / GIB,
            training.reserved_gib,
        )
        total = rank_bytes(*(v * GIB for v in values[:3]), peak_activations[rank], saved,
                           schedule.stages_per_rank, training.reserved_gib * GIB) / GIB
        for name, value in zip(MEMORY_SCHEMA, (rank, *values, total, spec.cluster.gpu_memory_gib - total)):
            rows[name].append(value)
    return pl.DataFrame(rows, schema=MEMORY_SCHEMA)


@dataclass(frozen=True)
class SecondCopy:
    """What a second copy of the parameters (DualPipe) costs one GPU at a pipeline depth."""

    pp: int
    """Pipeline depth the figures are for."""
    total_params: float
    """Parameters of the model."""
    routed_fraction: float
    """Share of the parameters that are routed experts."""
    ep: int
    """Expert-parallel degree the routed experts are spread over."""
    params_per_gpu: float
    """Parameters one GPU holds for one copy: (replicated + routed / ep) / pp."""
    params_per_gpu_without_ep: float
    """What it would hold were the experts not spread: all parameters / pp."""
    state_gib: float
    """GiB one copy's weights, gradients and optimizer shard take on one GPU: what the second copy adds."""
    share_of_memory: float
    """``state_gib`` / GPU memory."""


def second_copy(spec: PlanSpec, pp: int) -> SecondCopy:
    """The cost of DualPipe's second parameter copy per GPU at depth ``pp`` (averaged over ranks)."""
    training = spec.training
    total, routed = total_params(spec.model)
    per_gpu = ((total - routed) + routed / training.ep) / pp
    dp = spec.cluster.gpus // pp
    state = (
        per_gpu * (training.param_bytes + training.grad_bytes) + total / pp / dp * training.optimizer_bytes
    )
    return SecondCopy(
        pp=pp,
        total_params=total,
        routed_fraction=routed / total,
        ep=training.ep,
        params_per_gpu=per_gpu,
        params_per_gpu_without_ep=total / pp,
        state_gib=state / GIB,
        share_of_memory=state / GIB / spec.cluster.gpu_memory_gib,
    )
