"""A data-parallel (DDP) training job with no pipeline, 2 gloo ranks on CPU: what tracekit cannot label."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

RANKS = 2
STEPS = 3


def _train(rank: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=RANKS, timeout=timedelta(seconds=60))
    model = DistributedDataParallel(torch.nn.Linear(32, 32))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(STEPS):
        optimizer.zero_grad()
        model(torch.randn(8, 32, generator=torch.Generator().manual_seed(step))).square().mean().backward()
        optimizer.step()
    # Gloo's worker threads may still hold the reducer's last all-reduce: with the model alive at
    # teardown, torch 2.13 sometimes aborts a rank at exit ("terminate called without an active
    # exception"), about 1 run in 10 with stdin at /dev/null, with or without tracekit. Free the
    # model and meet at a barrier first.
    del model, optimizer
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    mp.spawn(_train, nprocs=RANKS, join=True)
