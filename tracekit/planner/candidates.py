"""Which (pipeline depth, schedule) pairs a spec allows, and why the others are out.

Depths: the spec's ``pp``, else every divisor of the GPU count from 2 up to the layer count. A
depth needs: GPUs divisible by pp (dp = GPUs / pp data-parallel replicas); for an MoE model dp
divisible by ep (expert parallelism is carved out of data parallelism, as in DeepSeek-V3); the
global batch divisible by dp x micro-batch size (the micro-batches per step, M). A schedule at a
depth needs every one of its pp x v stages along a path to hold a whole layer (v = 2 for
interleaved-1f1b, zbv, dualpipev), and what its generator requires (DualPipe: even pp, even M >=
2 pp; DualPipeV: M >= 2 pp; interleaved-1f1b: M a multiple of M // pp). Memory is checked later,
after simulation (``plan``).

Not for: costs or ranking.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.planner.spec import PlanSpec
from tracekit.schedule.model import Schedule, ScheduleError
from tracekit.schedule.registry import DEFAULT_CHUNKS, GENERATORS, generate

SIMULATION_BUDGET = 4096
"""Stage x micro-batch cells simulated at the real M; above it (and M > 4 pp) two samples are."""


@dataclass(frozen=True)
class Candidate:
    """One pipeline strategy: its schedule at the real micro-batch count, or two samples to extrapolate from.

    Large M is slow to generate and simulate (pp = 32, M = 2048 is 10^5 actions per schedule), and a
    schedule's steady state repeats one pattern per micro-batch: at M >= 2 pp its makespan, busy
    and exposed times grow linearly in M and its peak in-flight count stays put. So above
    ``SIMULATION_BUDGET`` the planner simulates M = 2 pp and 4 pp and extrapolates.
    """

    name: str
    """Schedule name."""
    pp: int
    """Pipeline depth (ranks)."""
    microbatches: int
    """Micro-batches per step (M)."""
    dp: int
    """Data-parallel replicas of the pipeline."""
    schedules: tuple[Schedule, ...]
    """The schedule at M, or at 2 pp and 4 pp micro-batches (smaller first)."""

    @property
    def extrapolated(self) -> bool:
        """True when the figures come from two smaller samples."""
        return len(self.schedules) > 1

    @property
    def path_stages(self) -> int:
        """Layer groups along a micro-batch's path: pp x v."""
        return self.pp * self.schedules[0].stages_per_rank


@dataclass(frozen=True)
class Rejection:
    """A (schedule, depth) the spec rules out before simulation, and why."""

    schedule: str
    """Schedule name, or "*" when the whole depth is out."""
    pp: int
    """Pipeline depth."""
    reason: str
    """Why, in words a user can act on."""


def depths(spec: PlanSpec) -> list[int]:
    """Pipeline depths to consider."""
    if spec.training.pp is not None:
        return [spec.training.pp]
    return [pp for pp in range(2, spec.model.layers + 1) if spec.cluster.gpus % pp == 0]


def chunks_of(name: str) -> int:
    """Stages per rank (v) the planner runs ``name`` with."""
    generator = GENERATORS[name]
    return DEFAULT_CHUNKS if generator.takes_chunks else generator.fixed_chunks


def depth_problem(spec: PlanSpec, pp: int) -> str | None:
    """Why depth ``pp`` cannot run at all, or None."""
    gpus, training = spec.cluster.gpus, spec.training
    if gpus % pp:
        return f"{gpus} GPUs do not split into {pp} pipeline stages"
    dp = gpus // pp
    if spec.model.is_moe and dp % training.ep:
        return f"expert parallelism ep={training.ep} must divide the {dp} data-parallel ranks (GPUs / pp)"
    per_step = dp * training.micro_batch_size
    if training.global_batch % per_step:
        return (
            f"global batch {training.global_batch} is not a multiple of dp x micro-batch size = "
            f"{dp} x {training.micro_batch_size} = {per_step}"
        )
    return None


def enumerate_candidates(spec: PlanSpec) -> tuple[list[Candidate], list[Rejection]]:
    """Every (depth, schedule) the spec allows, generated; and the rest with their reasons."""
    candidates: list[Candidate] = []
    rejections: list[Rejection] = []
    for pp in depths(spec):
        problem = depth_problem(spec, pp)
        if problem is not None:
            rejections.append(Rejection("*", pp, problem))
            continue
        dp = spec.cluster.gpus // pp
        microbatches = spec.training.global_batch // (dp * spec.training.micro_batch_size)
        for name in spec.training.schedules:
            v = chunks_of(name)
            if pp * v > spec.model.layers:
                reason = f"{pp} x {v} stages need at least one layer each; the model has {spec.model.layers}"
                rejections.append(Rejection(name, pp, reason))
                continue
            sampled = microbatches > 4 * pp and pp * v * microbatches > SIMULATION_BUDGET
            problem = microbatch_problem(name, pp, microbatches) if sampled else None
            counts = (2 * pp, 4 * pp) if sampled else (microbatches,)
            schedules: tuple[Schedule, ...] = ()
            if problem is None:
                chunks = v if GENERATORS[name].takes_chunks else None
                try:
                    schedules = tuple(generate(name, pp, m, chunks) for m in counts)
                except ScheduleError as error:
                    problem = str(error).removeprefix(f"{name}: ")
            if problem is not None:
                reason = f"{problem} (M = global batch / (dp x micro-batch size))"
                rejections.append(Rejection(name, pp, reason))
                continue
            candidates.append(Candidate(name, pp, microbatches, dp, schedules))
    return candidates, rejections


def microbatch_problem(name: str, pp: int, microbatches: int) -> str | None:
    """What generator ``name`` would say about ``microbatches`` on ``pp`` ranks, without generating.

    Mirrors the generators' checks (tests/planner/test_candidates.py holds the two together) for
    micro-batch counts too large to generate just to check them.
    """
    if name == "dualpipe" and pp % 2:
        return f"the pipeline ranks (pp) must be even, got {pp}"
    if name == "dualpipe" and (microbatches % 2 or microbatches < 2 * pp):
        return f"micro-batches must be even and at least 2 x pp = {2 * pp}, got {microbatches}"
    if name == "dualpipev" and microbatches < 2 * pp:
        return f"micro-batches must be at least 2 x pp = {2 * pp}, got {microbatches}"
    rounds = max(1, microbatches // pp)
    if name == "interleaved-1f1b" and microbatches % rounds:
        return f"micro-batches ({microbatches}) must be a multiple of the rounds ({rounds} = M // P), as in torch"
    return None
