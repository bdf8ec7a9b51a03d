"""A small pipeline-parallel training job on CPU, to capture real traces of real schedules.

Run it as ``python -m examples.pipeline_job --schedule dualpipev --ranks 4 --microbatches 8 --steps 3``;
it spawns its own ranks (torch.multiprocessing, gloo), or, when started by torchrun, runs as the
rank torchrun made. ``--dp D`` runs D data-parallel replicas of the ``--ranks P`` pipeline (D x P
processes): ranks d*P..d*P+P-1 form replica d (each pipeline its own ``dist.new_group``), and after
every step each gradient is averaged across the replicas (an all-reduce over the group of the
ranks holding the same stages), as data parallelism does; rank options take global ranks. Each
stage is a few ``tanh(Linear)`` layers, sized so one action costs a few milliseconds and the
traces stay small. ``--slow-rank R --slow-ms X`` turns rank R (any rank,
first and last included) into a straggler: each of its stage modules takes X ms more in every
forward and again in every backward (the delay sits on the stage's output, so its gradient meets
it first: B, or I when the weight gradient is split off; on the first stage, whose input needs no
gradient, wherever its backward runs), from step ``--slow-from-step K`` on (default 0: from the
start). ``--slow-kinds`` chooses which of its work is slow (default ``F,B``: forward and backward
as above; ``W`` delays the weight gradient instead, a hook on each stage module's first weight, which
fires in W where the schedule splits the backward, else inside B). ``--slow-how spin`` (the default)
busy-waits for that much of its CPU time, holding the core the way compute does; ``sleep`` frees
it, as a slow accelerator leaves the host's other work alone; ``gc`` spends it in forced Python
garbage collections (a GC storm, what Megatron-LM's ``--manual-gc`` guards against). ``--slow-link A:B --slow-link-ms X`` makes the link between ranks A and B slow: every wait on a transfer between
them (torch.distributed.pipelining schedules) returns X ms late, while compute runs at normal
speed. ``--cpus C0,C1,...`` pins rank r to CPU Cr (a test can then put a busy process beside one
rank alone). ``--overlap-hook`` (deepseek-dualpipe) gives the stage modules
DualPipe's ``overlaped_forward_backward`` hook; ``--crash-rank R --crash-step S`` makes rank R
SIGKILL itself in the middle of step S, to see what a capture does with a dying rank;
``--eval-step S`` runs a forward-only call (torch's ``eval()``, DualPipe under ``no_grad``) right
after training step S. ``--leak-activation-rank R`` makes rank R keep one micro-batch's activations
alive beyond what its schedule needs: its first stage module keeps a copy of every tensor one
forward saves (the input and each layer's output), taken at its first forward of a step and
replaced at the next step's, as a forgotten reference to a debugging tensor would. ``deepseek-dualpipev`` needs DeepSeek's upstream DualPipe (PyPI 1.0.0
predates DualPipeV) first on PYTHONPATH.

This is an example of a user's job, not part of the collector: it imports torch (and, for
``deepseek-dualpipe``, the ``dualpipe`` package) and nothing from tracekit or the collector (only
its DeepSeek half, ``examples.deepseek_stages``), so ``tracekit record`` captures it exactly as
it would capture any unmodified job. The two CPU shims DeepSeek's DualPipe needs live there, never
in the collector.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

from examples import deepseek_stages
from examples.launcher_store import hosted_store

SLOW_HOWS = ("spin", "sleep", "gc")
"""How a straggler can lose its time (``--slow-how``)."""

STAGES_PER_RANK: dict[str, int] = {
    "gpipe": 1,
    "1f1b": 1,
    "interleaved-1f1b": 2,
    "zbv": 2,
    "dualpipev": 2,
    "deepseek-dualpipe": 2,
    "deepseek-dualpipev": 2,
}
"""How many stage modules each rank holds, per schedule."""

V_SHAPED = frozenset({"zbv", "dualpipev", "deepseek-dualpipe", "deepseek-dualpipev"})
"""Schedules whose rank r holds stages r and 2P-1-r; looped ones hold r and r+P."""

DEEPSEEK = frozenset({"deepseek-dualpipe", "deepseek-dualpipev"})
"""Schedules run by DeepSeek's ``dualpipe`` package (DualPipeV needs its upstream source on the path)."""


SLOW_KINDS = frozenset({"F", "B", "W"})
"""What ``--slow-kinds`` can slow: forward, input gradient (B or I), weight gradient."""


@dataclass(frozen=True)
class JobConfig:
    """What to train and how: one value shared by every rank."""

    schedule: str
    """One of STAGES_PER_RANK's keys."""
    ranks: int
    """Pipeline ranks of one replica."""
    microbatches: int
    """Micro-batches per step (DualPipe: both directions together)."""
    steps: int
    """Training steps (calls of the schedule's step())."""
    hidden: int = 512
    """Width of every layer."""
    layers: int = 2
    """tanh(Linear) layers per stage module."""
    microbatch_rows: int = 64
    """Rows per micro-batch."""
    slow_rank: int | None = None
    """Rank whose compute is slowed (a straggler), or None."""
    slow_ms: float = 0.0
    """Extra time per forward and per backward of each stage module on slow_rank, milliseconds."""
    slow_from_step: int = 0
    """First step in which slow_rank is slow (it runs at normal speed before)."""
    slow_how: str = "spin"
    """How the straggler loses its time: ``spin`` (busy-wait, holds the core), ``sleep`` or ``gc``."""
    slow_kinds: frozenset[str] = frozenset({"F", "B"})
    """Which of slow_rank's work is slow: ``F`` forward, ``B`` input gradient (B or I), ``W`` weight gradient."""
    slow_link: tuple[int, int] | None = None
    """Two ranks whose transfers to each other are slow, or None."""
    cpus: tuple[int, ...] | None = None
    """The CPU each rank is pinned to (one per rank, ``--cpus``), or None: wherever the OS puts it."""
    slow_link_ms: float = 0.0
    """Extra time every wait on a transfer over slow_link takes, milliseconds."""
    crash_rank: int | None = None
    """Rank that kills itself (SIGKILL) mid-step, to test what a capture does with a dying rank."""
    crash_step: int = 1
    """Step during which crash_rank dies."""
    overlap_hook: bool = False
    """deepseek-dualpipe(v) only: give the stage modules DualPipe's F&B overlap hook."""
    eval_step: int | None = None
    """Run one forward-only call (an evaluation) right after this training step, or None."""
    dp: int = 1
    """Data-parallel replicas of the pipeline; the job runs ``dp * ranks`` processes."""
    leak_activation_rank: int | None = None
    """Rank whose first stage module keeps one extra micro-batch's activations alive, or None."""

    @property
    def world_size(self) -> int:
        """Processes of the job: every replica's pipeline ranks."""
        return self.dp * self.ranks

    def __post_init__(self) -> None:
        if self.schedule not in STAGES_PER_RANK:
            raise ValueError(f"unknown schedule {self.schedule!r}; expected one of {sorted(STAGES_PER_RANK)}")
        if self.ranks < 2:
            raise ValueError("a pipeline needs at least 2 ranks")
        if self.schedule == "deepseek-dualpipe" and (
            self.ranks % 2 or self.microbatches % 2 or self.microbatches < 2 * self.ranks
        ):
            raise ValueError(
                "DualPipe needs an even number of ranks and an even micro-batch count >= 2 * ranks"
            )
        if self.schedule == "deepseek-dualpipev" and self.microbatches < 2 * self.ranks:
            raise ValueError("DualPipeV needs a micro-batch count >= 2 * ranks")
        if self.dp < 1:
            raise ValueError("--dp must be >= 1")
        if self.eval_step is not None and not 0 <= self.eval_step < self.steps:
            raise ValueError(f"--eval-step must be in 0..{self.steps - 1}")
        for rank in (self.slow_rank, self.crash_rank, self.leak_activation_rank):
            if rank is not None and not 0 <= rank < self.world_size:
                raise ValueError(f"rank {rank} is not in 0..{self.world_size - 1}")
        if self.overlap_hook and self.schedule not in DEEPSEEK:
            raise ValueError("--overlap-hook is DualPipe's hook: use it with a deepseek-dualpipe(v) schedule")
        if self.slow_ms < 0 or self.slow_link_ms < 0 or self.slow_from_step < 0:
            raise ValueError("--slow-ms, --slow-link-ms and --slow-from-step must be >= 0")
        if self.steps < 1 or self.microbatches < 1:
            raise ValueError("--steps and --microbatches must be >= 1")
        if not self.slow_kinds or not self.slow_kinds <= SLOW_KINDS:
            raise ValueError(f"--slow-kinds takes a comma-separated subset of {','.join(sorted(SLOW_KINDS))}")
        if self.cpus is not None and len(self.cpus) != self.world_size:
            raise ValueError(f"--cpus names one CPU per rank: {self.world_size} of them")
        if self.slow_how not in SLOW_HOWS:
            raise ValueError(f"--slow-how is one of {', '.join(SLOW_HOWS)}")
        if self.slow_link is not None:
            if self.schedule in DEEPSEEK:
                raise ValueError("--slow-link slows torch.distributed.pipelining's transfers, not DualPipe's")
            if len(set(self.slow_link)) != 2 or not all(0 <= r < self.world_size for r in self.slow_link):
                raise ValueError(f"--slow-link needs two different ranks in 0..{self.world_size - 1}")


class _Delay(torch.autograd.Function):
    """Identity that loses ``forward_s`` in forward and ``backward_s`` in backward: simulated slow compute."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, x: torch.Tensor, forward_s: float, backward_s: float, how: str
    ) -> torch.Tensor:
        ctx.seconds, ctx.how = backward_s, how
        _lose(forward_s, how)
        return x.view_as(x).clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:  # type: ignore[override]
        _lose(ctx.seconds, ctx.how)
        return grad, None, None, None


_HEAP: list[list[int]] = []
"""The long-lived objects a GC storm's full collections walk (built on first use)."""


def _lose(seconds: float, how: str) -> None:
    """Spend ``seconds``: of CPU busy-waiting (spin) or in forced full garbage collections (gc), or asleep."""
    if seconds <= 0:
        return
    if how == "sleep":
        time.sleep(seconds)
        return
    if how == "gc" and not _HEAP:
        # torch's own heap makes one full collection cost most of a second: freeze it out of the
        # collector's sight, so that each collection walks this heap alone (a few ms).
        gc.freeze()
        _HEAP.extend([index] for index in range(10_000))
    # spin and gc spend the thread's own CPU time, as work does: on a busy host they take longer.
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        if how == "gc":
            gc.collect()


class _LateWork:
    """A p2p work whose wait returns ``seconds`` after the real one: a slow link."""

    def __init__(self, work: Any, seconds: float) -> None:
        self._work, self._seconds = work, seconds

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        result = self._work.wait(*args, **kwargs)
        time.sleep(self._seconds)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _slow_link(config: JobConfig, rank: int) -> None:
    """Make this rank's waits on transfers from its slow-link peer return late (torch schedules)."""
    if config.slow_link is None or rank not in config.slow_link:
        return
    from torch.distributed.pipelining import schedules

    peer = config.slow_link[1] if rank == config.slow_link[0] else config.slow_link[0]
    seconds = config.slow_link_ms / 1000
    batch_p2p = schedules._batch_p2p

    def late_batch_p2p(p2p_ops: list[Any], *args: Any, **kwargs: Any) -> Any:
        works = batch_p2p(p2p_ops, *args, **kwargs)
        if works and any(op.op is dist.irecv and op.peer == peer for op in p2p_ops):
            works[-1] = _LateWork(works[-1], seconds)  # in place: a wrapper's tags on the list stay
        return works

    schedules._batch_p2p = late_batch_p2p


class StageModule(nn.Module):
    """One pipeline stage: ``layers`` tanh(Linear) layers, optionally slowed or set to crash."""

    def __init__(self, config: JobConfig, seconds_slower: float, crash_after_forwards: int | None) -> None:
        super().__init__()
        linear = deepseek_stages.DeferredWeightLinear if config.schedule in DEEPSEEK else nn.Linear
        self.layers = nn.ModuleList(linear(config.hidden, config.hidden) for _ in range(config.layers))
        self.seconds_slower = seconds_slower
        self.how = config.slow_how
        self.slow_kinds = config.slow_kinds
        # The weight's gradient is computed in W when the schedule splits the backward, else in B.
        self.layers[0].weight.register_hook(self._slow_weight_gradient)
        self.crash_after_forwards = crash_after_forwards
        self.forwards = 0
        self.leaks = False
        """True: keep a copy of the tensors the step's first forward saves (``--leak-activation-rank``)."""
        self.kept: list[torch.Tensor] = []
        self.kept_this_step = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        if self.crash_after_forwards is not None and self.forwards > self.crash_after_forwards:
            # SIGKILL, not an exception: a rank lost to the OOM killer or a node failure runs no cleanup.
            os.kill(os.getpid(), signal.SIGKILL)
        keep = self.leaks and not self.kept_this_step
        held = [x.detach().clone()] if keep else []
        for layer in self.layers:
            x = torch.tanh(layer(x))
            if keep:
                held.append(x.detach().clone())
        if keep:
            self.kept, self.kept_this_step = held, True  # the previous step's copy is freed here
        forward_s = self.seconds_slower if "F" in self.slow_kinds else 0.0
        backward_s = self.seconds_slower if "B" in self.slow_kinds else 0.0
        if forward_s or backward_s:
            x = _Delay.apply(x, forward_s, backward_s, self.how)
        return x

    def _slow_weight_gradient(self, grad: torch.Tensor) -> None:
        if self.seconds_slower and "W" in self.slow_kinds:
            _lose(self.seconds_slower, self.how)


class OverlappingStageModule(StageModule):
    """A stage that offers DualPipe its F&B hook, as DeepSeek's modules do (``--overlap-hook``).

    On a GPU the hook would interleave the two halves' kernels; here it runs the forward, then the
    backward, inside the one call, so a trace cannot tell the halves apart: only the pair is seen.
    dualpipe 1.0.0 looks for ``overlaped_forward_backward``, upstream (DualPipe and DualPipeV) for
    ``overlapped_forward_backward``: the module answers to both.
    """

    overlapped_forward_backward = classmethod(deepseek_stages.overlapped_forward_backward)
    overlaped_forward_backward = classmethod(deepseek_stages.overlapped_forward_backward)  # 1.0.0's spelling


def stages_of_rank(config: JobConfig, rank: int) -> list[int]:
    """Global stage indices rank ``rank`` holds, in the order its schedule expects."""
    if STAGES_PER_RANK[config.schedule] == 1:
        return [rank]
    if config.schedule in V_SHAPED:
        return [rank, 2 * config.ranks - 1 - rank]
    return [rank, rank + config.ranks]


def _build_modules(config: JobConfig, rank: int) -> list[StageModule]:
    slower = config.slow_ms / 1000 if rank == config.slow_rank else 0.0
    modules = []
    for position, stage in enumerate(stages_of_rank(config, rank % config.ranks)):
        # Same weights for the same stage on every run, whichever rank builds it.
        torch.manual_seed(1000 + stage)
        crash = None
        if rank == config.crash_rank and position == 0:
            forwards_per_step = config.microbatches // (2 if config.schedule == "deepseek-dualpipe" else 1)
            crash = config.crash_step * forwards_per_step + forwards_per_step // 2
        module_class = OverlappingStageModule if config.overlap_hook else StageModule
        modules.append(module_class(config, slower, crash))
    modules[0].leaks = rank == config.leak_activation_rank
    return modules


def _batch(config: JobConfig, step: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(rows, config.hidden, generator=generator)
    return x, torch.tanh(x.flip(1))


def _torch_step_fn(
    config: JobConfig, rank: int, modules: list[StageModule], group: Any
) -> Callable[[int, bool], None]:
    """Rank ``rank``'s (its pipeline rank's) torch schedule over process group ``group``."""
    from torch.distributed import pipelining as pp

    classes = {
        "gpipe": pp.ScheduleGPipe,
        "1f1b": pp.Schedule1F1B,
        "interleaved-1f1b": pp.ScheduleInterleaved1F1B,
        "zbv": pp.ScheduleZBVZeroBubble,
        "dualpipev": pp.ScheduleDualPipeV,
    }
    num_stages = config.ranks * STAGES_PER_RANK[config.schedule]
    stage_ids = stages_of_rank(config, rank)
    stages = [
        pp.PipelineStage(module, stage, num_stages, torch.device("cpu"), group=group)
        for module, stage in zip(modules, stage_ids)
    ]
    schedule_class = classes[config.schedule]
    stage_arg = stages[0] if len(stages) == 1 else stages
    schedule = schedule_class(stage_arg, config.microbatches, loss_fn=F.mse_loss)
    holds_first, holds_last = 0 in stage_ids, num_stages - 1 in stage_ids
    replica = 0 if group is None else dist.get_rank() // config.ranks

    def run(step: int, forward_only: bool) -> None:
        # Each replica trains on its own data (replica 0 on the batches of a single pipeline).
        x, y = _batch(config, step + 100_000 * replica, config.microbatches * config.microbatch_rows)
        args = (x,) if holds_first else ()
        run_schedule = schedule.eval if forward_only else schedule.step
        run_schedule(*args, target=y if holds_last else None)

    return run


def data_parallel_groups(config: JobConfig) -> tuple[Any, Any]:
    """This rank's (pipeline group, data-parallel group); (None, None) for a single pipeline.

    Every rank creates every group, in the same order, as ``dist.new_group`` requires.
    """
    if config.dp == 1:
        return None, None
    rank, pipelines, replicas, timeout = dist.get_rank(), [], [], timedelta(seconds=60)
    for replica in range(config.dp):
        ranks = list(range(replica * config.ranks, (replica + 1) * config.ranks))
        pipelines.append(dist.new_group(ranks, timeout=timeout))
    for pp_rank in range(config.ranks):
        replicas.append(dist.new_group(list(range(pp_rank, config.world_size, config.ranks)), timeout=timeout))
    return pipelines[rank // config.ranks], replicas[rank % config.ranks]


def _average_gradients(parameters: list[torch.Tensor], group: Any, replicas: int) -> None:
    """Average each gradient across the data-parallel replicas (one all-reduce per parameter)."""
    for parameter in parameters:
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad, group=group)
            parameter.grad /= replicas


def make_trainer(config: JobConfig, rank: int) -> Callable[[int], None]:
    """Build rank ``rank``'s stages and schedule (process group already up); returns train(step)."""
    pipeline_group, dp_group = data_parallel_groups(config)
    modules = _build_modules(config, rank)
    _slow_link(config, rank)
    pp_rank = rank % config.ranks
    if config.schedule in DEEPSEEK:
        run_step = deepseek_stages.dualpipe_step_fn(config, pp_rank, modules, _batch, pipeline_group)
    else:
        run_step = _torch_step_fn(config, pp_rank, modules, pipeline_group)
    parameters = [p for module in modules for p in module.parameters()]
    optimizer = torch.optim.SGD(parameters, lr=1e-3)
    slower = modules[0].seconds_slower

    def train(step: int) -> None:
        for module in modules:
            module.seconds_slower = slower if step >= config.slow_from_step else 0.0
            module.kept_this_step = False
        optimizer.zero_grad()
        run_step(step, False)
        if dp_group is not None:
            _average_gradients(parameters, dp_group, config.dp)
        optimizer.step()
        if step == config.eval_step:
            run_step(10_000 + step, True)

    return train


def init_rank(rank: int, world_size: int) -> None:
    """One CPU thread and a gloo process group with a 60 s timeout (MASTER_ADDR/PORT from the env)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))


def _train(rank: int, world_size: int, config: JobConfig) -> None:
    if config.cpus is not None:
        os.sched_setaffinity(0, {config.cpus[rank]})
    init_rank(rank, world_size)
    try:
        train = make_trainer(config, rank)
        for step in range(config.steps):
            train(step)
    finally:
        dist.destroy_process_group()


def _spawned_rank(rank: int, world_size: int, config: JobConfig) -> None:
    _train(rank, world_size, config)


def run_job(config: JobConfig) -> int:
    """Train under torchrun (RANK/WORLD_SIZE set) or spawn ``config.world_size`` ranks; returns an exit status."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        world_size = int(os.environ["WORLD_SIZE"])
        if world_size % config.dp:
            print(f"pipeline_job: {world_size} ranks do not form {config.dp} replicas", file=sys.stderr)
            return 1
        if world_size != config.world_size:
            config = JobConfig(**{**config.__dict__, "ranks": world_size // config.dp})
        _train(int(os.environ["RANK"]), world_size, config)
        return 0
    try:
        with hosted_store():
            mp.spawn(_spawned_rank, args=(config.world_size, config), nprocs=config.world_size, join=True)
    except mp.ProcessExitedException as error:
        print(f"pipeline_job: rank {error.error_index} exited with status {error.exit_code}", file=sys.stderr)
        return 1
    except mp.ProcessRaisedException as error:
        print(f"pipeline_job: a rank failed:\n{error}", file=sys.stderr)
        return 1
    return 0


def _rank_pair(text: str) -> tuple[int, int]:
    first, sep, second = text.partition(":")
    if not sep or not first.isdigit() or not second.isdigit():
        raise argparse.ArgumentTypeError(f"expected A:B (two ranks), not {text!r}")
    return int(first), int(second)


def parse_args(argv: Sequence[str] | None = None) -> JobConfig:
    """Command-line arguments to a JobConfig."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.pipeline_job", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--schedule", choices=sorted(STAGES_PER_RANK), required=True)
    parser.add_argument("--ranks", type=int, default=4, help="pipeline ranks of one replica")
    parser.add_argument(
        "--dp", type=int, default=1, help="data-parallel replicas of the pipeline (dp x ranks processes)"
    )
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=JobConfig.hidden)
    parser.add_argument("--layers", type=int, default=JobConfig.layers, help="tanh(Linear) layers per stage")
    parser.add_argument("--microbatch-rows", type=int, default=JobConfig.microbatch_rows)
    parser.add_argument("--slow-rank", type=int, default=None, help="make this rank a straggler")
    parser.add_argument(
        "--slow-ms", type=float, default=0.0, help="extra ms per forward and backward of each stage"
    )
    parser.add_argument(
        "--slow-from-step", type=int, default=0, help="the slow rank is slow from this step on"
    )
    parser.add_argument(
        "--slow-how", choices=SLOW_HOWS, default="spin", help="busy-wait, sleep or forced garbage collections"
    )
    parser.add_argument(
        "--slow-kinds",
        default="F,B",
        help="which work of the slow rank is slow: F forward, B input gradient (B or I), W weight gradient",
    )
    parser.add_argument(
        "--slow-link", type=_rank_pair, default=None, help="A:B, two ranks whose transfers are slow"
    )
    parser.add_argument(
        "--slow-link-ms", type=float, default=0.0, help="extra ms per wait on a transfer over the link"
    )
    parser.add_argument(
        "--cpus", type=_cpu_list, default=None, help="C0,C1,...: pin rank r to CPU Cr (one per rank)"
    )
    parser.add_argument("--crash-rank", type=int, default=None, help="this rank SIGKILLs itself mid-step")
    parser.add_argument("--crash-step", type=int, default=1, help="the step during which --crash-rank dies")
    parser.add_argument(
        "--overlap-hook",
        action="store_true",
        help="deepseek-dualpipe(v): run F&B chunks through one module hook",
    )
    parser.add_argument("--eval-step", type=int, default=None, help="a forward-only call after this step")
    parser.add_argument(
        "--leak-activation-rank",
        type=int,
        default=None,
        help="this rank keeps one micro-batch's activations alive beyond its schedule's need",
    )
    args = parser.parse_args(argv)
    try:
        return JobConfig(
            schedule=args.schedule,
            ranks=args.ranks,
            microbatches=args.microbatches,
            steps=args.steps,
            hidden=args.hidden,
            layers=args.layers,
            microbatch_rows=args.microbatch_rows,
            slow_rank=args.slow_rank,
            slow_ms=args.slow_ms,
            slow_from_step=args.slow_from_step,
            slow_how=args.slow_how,
            slow_kinds=frozenset(kind.strip() for kind in args.slow_kinds.split(",") if kind.strip()),
            slow_link=args.slow_link,
            slow_link_ms=args.slow_link_ms,
            cpus=args.cpus,
            crash_rank=args.crash_rank,
            crash_step=args.crash_step,
            overlap_hook=args.overlap_hook,
            eval_step=args.eval_step,
            dp=args.dp,
            leak_activation_rank=args.leak_activation_rank,
        )
    except ValueError as error:
        parser.error(str(error))


def _cpu_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of CPU numbers") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m examples.pipeline_job``."""
    return run_job(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
