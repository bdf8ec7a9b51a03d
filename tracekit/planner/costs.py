"""Per-action times for the timing engine, from FLOPs, achievable throughput, volumes and bandwidths.

A candidate's model is cut into pp x v layer groups along a micro-batch's path (``layers.partition``
balances their compute); the group at path position j runs on whichever stage sits at position j
(DualPipe's two directions each run the whole model, so its stages ``j`` and ``pp + j`` share a
group). Per group, in milliseconds:

* compute: F = (matmul + attention core) / throughput; I = (matmul + 2 x core + recompute) /
  throughput; W = matmul / throughput; the embedding sits on the first group, the head on the last.
* all-to-all, per pass (forward: dispatch + combine; backward the same volumes back):
  max(cross-node bytes / network bandwidth, NVLink bytes / NVLink bandwidth), the two legs of
  DeepSeek's node-limited dispatch running pipelined.
* engine costs: an action alone runs its all-to-all exposed (F and I carry one pass, W none, a full
  B one); an overlapped F&B pair (DualPipe's chunk) costs max(compute of both halves, all-to-all
  of both), each half's communication hidden behind the other's compute (DeepSeek-V3 3.2.1).
* point-to-point: one micro-batch's activations (T x h, BF16) per hop over the network when
  neighbouring pipeline ranks sit on different nodes, else over NVLink; the engine adds it to
  every dependency that crosses ranks.

A ``CostScale`` from a captured run (``calibrate``) multiplies each kind's estimate.
Not for: memory (``memory``) or ranking (``plan``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.planner.layers import (
    LayerFigures,
    embedding_figures,
    head_figures,
    layer_figures,
    partition,
)
from tracekit.planner.spec import PlanSpec
from tracekit.schedule.action import OverlappedPair
from tracekit.schedule.costs import Costs
from tracekit.schedule.model import Schedule

_MS_PER_S = 1e3


@dataclass(frozen=True)
class CostScale:
    """Measured / estimated time per action kind, from a captured run; 1.0 leaves the estimate as is."""

    forward: float = 1.0
    """F."""
    backward_input: float = 1.0
    """I (backward for inputs)."""
    backward_weight: float = 1.0
    """W (backward for weights)."""
    full_backward: float = 1.0
    """B (full backward)."""
    overlapped: float = 1.0
    """An overlapped F&B pair."""


UNSCALED = CostScale()
"""Estimates as they are: no captured run."""


@dataclass(frozen=True)
class GroupTimes:
    """One layer group's times for one micro-batch, milliseconds."""

    forward: float
    """F compute."""
    backward_input: float
    """I compute (recomputation included)."""
    backward_weight: float
    """W compute."""
    a2a: float
    """All-to-all of one pass (forward or backward), exposed unless overlapped."""


@dataclass(frozen=True)
class Layout:
    """How a candidate cuts the model: the layer groups along a path and their figures."""

    groups: tuple[range, ...]
    """Layers (0-based) of each path position."""
    figures: tuple[LayerFigures, ...]
    """Per position: its layers' figures summed, embedding on the first, head on the last."""
    times: tuple[GroupTimes, ...]
    """Per position, milliseconds."""


def group_times(spec: PlanSpec, figures: LayerFigures) -> GroupTimes:
    """Compute and all-to-all milliseconds of one group for one micro-batch."""
    flops_per_ms = spec.cluster.throughput_tflops(spec.training.precision) * 1e12 / _MS_PER_S
    cluster = spec.cluster
    a2a_s = max(
        figures.a2a_inter_bytes / (cluster.inter_node_gbps * 1e9),
        figures.a2a_intra_bytes / (cluster.intra_node_gbps * 1e9),
    )
    return GroupTimes(
        forward=(figures.matmul_flops + figures.attention_flops) / flops_per_ms,
        backward_input=(figures.matmul_flops + 2 * figures.attention_flops + figures.recompute_flops)
        / flops_per_ms,
        backward_weight=figures.matmul_flops / flops_per_ms,
        a2a=a2a_s * _MS_PER_S,
    )


def layout(spec: PlanSpec, positions: int, hides_a2a: bool = False) -> Layout:
    """Cut the model into ``positions`` groups of whole layers, balanced by per-micro-batch time.

    ``hides_a2a``: balance compute alone, for schedules whose F&B pairs hide the all-to-all.
    """
    model, training, cluster = spec.model, spec.training, spec.cluster
    per_layer = [layer_figures(model, training, cluster, layer) for layer in range(model.layers)]
    extras = [LayerFigures()] * model.layers
    extras[0] = extras[0] + embedding_figures(model)
    extras[-1] = extras[-1] + head_figures(model, training)
    weights = [_total(group_times(spec, f + extra), hides_a2a) for f, extra in zip(per_layer, extras)]
    groups = tuple(partition(weights, positions))
    figures = []
    for group in groups:
        summed = LayerFigures()
        for layer in group:
            summed = summed + per_layer[layer] + extras[layer]
        figures.append(summed)
    return Layout(groups, tuple(figures), tuple(group_times(spec, f) for f in figures))


def _total(times: GroupTimes, hides_a2a: bool) -> float:
    compute = times.forward + times.backward_input + times.backward_weight
    return compute if hides_a2a else compute + 2 * times.a2a


def p2p_ms(spec: PlanSpec, pp: int) -> float:
    """Milliseconds to send one micro-batch's activations to the next pipeline rank."""
    training, cluster = spec.training, spec.cluster
    message = training.micro_batch_size * training.sequence_length * spec.model.hidden * 2  # BF16
    across_nodes = cluster.gpus // pp >= cluster.gpus_per_node and pp > 1
    bandwidth = cluster.inter_node_gbps if across_nodes else cluster.intra_node_gbps
    return message / (bandwidth * 1e9) * _MS_PER_S


def stage_positions(schedule: Schedule) -> tuple[int, ...]:
    """Path position of each stage: the index of its layer group along its micro-batches' path."""
    positions = [-1] * schedule.num_stages
    for path in schedule.paths:
        for stage in range(path.first_stage, path.last_stage + 1):
            positions[stage] = stage - path.first_stage
    assert -1 not in positions, schedule.paths
    return tuple(positions)


def pair_partners(schedule: Schedule) -> dict[int, int]:
    """For each stage that runs the forward half of an F&B pair, the stage of its backward half."""
    partners: dict[int, int] = {}
    for steps in schedule.steps:
        for step in steps:
            if isinstance(step, OverlappedPair):
                known = partners.setdefault(step.forward.stage, step.backward.stage)
                assert known == step.backward.stage, (schedule.name, step)
    return partners


def engine_costs(spec: PlanSpec, schedule: Schedule, cut: Layout, scale: CostScale = UNSCALED) -> Costs:
    """The timing engine's per-stage costs (ms) for ``schedule`` on layout ``cut``."""
    positions = stage_positions(schedule)
    per_stage = [cut.times[position] for position in positions]
    partners = pair_partners(schedule)
    overlapped = tuple(
        scale.overlapped * overlapped_ms(t, per_stage[partners.get(stage, stage)])
        for stage, t in enumerate(per_stage)
    )
    return Costs(
        forward=tuple(scale.forward * (t.forward + t.a2a) for t in per_stage),
        backward_input=tuple(scale.backward_input * (t.backward_input + t.a2a) for t in per_stage),
        backward_weight=tuple(scale.backward_weight * t.backward_weight for t in per_stage),
        full_backward=tuple(
            scale.full_backward * (t.backward_input + t.backward_weight + t.a2a) for t in per_stage
        ),
        overlapped=overlapped,
        comm=p2p_ms(spec, schedule.num_ranks),
    )


def pair_compute_ms(forward: GroupTimes, backward: GroupTimes) -> float:
    """Compute of an F&B pair: the forward group's forward and the backward group's full backward."""
    return forward.forward + backward.backward_input + backward.backward_weight


def overlapped_ms(forward: GroupTimes, backward: GroupTimes) -> float:
    """An F&B pair: the forward's and the full backward's compute, or both all-to-all passes if longer."""
    return max(pair_compute_ms(forward, backward), forward.a2a + backward.a2a)
