"""A small pipeline-parallel training job on CUDA, for ``benchmarks/gpu_check.py``.

torch.distributed.pipelining with NCCL and GPU-sized steps (wide tanh(Linear) stages), in two
shapes:

- two or more GPUs: ``--ranks R`` processes, rank r on ``cuda:r``, 1F1B: activations and gradients
  cross between GPUs as NCCL send/recv kernels on NCCL's own streams, beside the compute;
- one GPU: one process holding both stages of a V schedule (ZBV): the hand-off between its two
  stages stays on the GPU, so there is no communication kernel (NCCL refuses two ranks on one GPU).

Each step ends with ``torch.cuda.synchronize()``; with ``--times PATH`` rank 0 writes its step wall
times (ms) there as JSON, which the check compares with and without capture. Not for: anything on
CPU (``examples/pipeline_job.py`` is the CPU job).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GpuJobConfig:
    """The job's shape."""

    ranks: int
    """Processes, one GPU each; 1: one process holds both stages of a V schedule."""
    steps: int = 8
    microbatches: int = 8
    hidden: int = 4096
    """Width of each Linear: 4096 makes a micro-batch's forward take milliseconds on a datacenter GPU."""
    layers: int = 4
    """tanh(Linear) layers per stage."""
    microbatch_rows: int = 256
    times: Path | None = None
    """Where rank 0 writes its step wall times (ms), or None."""

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.steps < 1 or self.microbatches < 2 * max(self.ranks, 1):
            raise ValueError("need ranks >= 1, steps >= 1 and microbatches >= 2 * ranks")


def _stage(config: GpuJobConfig, stage: int, device: torch.device) -> nn.Module:
    torch.manual_seed(1000 + stage)
    layers: list[nn.Module] = []
    for _ in range(config.layers):
        layers += [nn.Linear(config.hidden, config.hidden), nn.Tanh()]
    return nn.Sequential(*layers).to(device)


def _train(rank: int, config: GpuJobConfig) -> None:
    from torch.distributed import pipelining as pp

    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl", rank=rank, world_size=config.ranks, timeout=timedelta(seconds=120), device_id=device
    )
    try:
        if config.ranks == 1:
            num_stages, stage_ids, schedule_class = 2, [0, 1], pp.ScheduleZBVZeroBubble
        else:
            num_stages, stage_ids, schedule_class = config.ranks, [rank], pp.Schedule1F1B
        stages = [pp.PipelineStage(_stage(config, s, device), s, num_stages, device) for s in stage_ids]
        schedule = schedule_class(
            stages[0] if len(stages) == 1 else stages, config.microbatches, loss_fn=F.mse_loss
        )
        parameters = [p for stage in stages for p in stage.submod.parameters()]
        optimizer = torch.optim.SGD(parameters, lr=1e-4)
        holds_first, holds_last = 0 in stage_ids, num_stages - 1 in stage_ids
        times = []
        for step in range(config.steps):
            generator = torch.Generator(device=device).manual_seed(step)
            rows = config.microbatches * config.microbatch_rows
            x = torch.randn(rows, config.hidden, generator=generator, device=device)
            began = time.perf_counter()
            schedule.step(
                *((x,) if holds_first else ()), target=torch.tanh(x.flip(1)) if holds_last else None
            )
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - began) * 1000)
        if rank == 0 and config.times is not None:
            config.times.write_text(json.dumps(times))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_args(argv: Sequence[str] | None = None) -> GpuJobConfig:
    """The job's config from its command line; ``--ranks`` defaults to 2 with two GPUs or more, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    count = torch.cuda.device_count()
    parser.add_argument("--ranks", type=int, default=2 if count >= 2 else 1)
    parser.add_argument("--steps", type=int, default=GpuJobConfig.steps)
    parser.add_argument("--microbatches", type=int, default=GpuJobConfig.microbatches)
    parser.add_argument("--hidden", type=int, default=GpuJobConfig.hidden)
    parser.add_argument("--layers", type=int, default=GpuJobConfig.layers)
    parser.add_argument("--microbatch-rows", type=int, default=GpuJobConfig.microbatch_rows)
    parser.add_argument("--times", type=Path, default=None)
    args = parser.parse_args(argv)
    return GpuJobConfig(
        ranks=args.ranks,
        steps=args.steps,
        microbatches=args.microbatches,
        hidden=args.hidden,
        layers=args.layers,
        microbatch_rows=args.microbatch_rows,
        times=args.times,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job: spawn its ranks (or one process); exit status 1 when a rank fails."""
    config = parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_job: no CUDA device", file=sys.stderr)
        return 1
    if config.ranks > torch.cuda.device_count():
        print(
            f"gpu_job: {config.ranks} ranks need {config.ranks} GPUs, {torch.cuda.device_count()} here",
            file=sys.stderr,
        )
        return 1
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(_free_port())
    try:
        mp.spawn(_train, args=(config,), nprocs=config.ranks, join=True)
    except (mp.ProcessExitedException, mp.ProcessRaisedException) as error:
        print(f"gpu_job: a rank failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
