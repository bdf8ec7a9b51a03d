"""A one-process job training with the stand-in newer ``DualPipe`` (tests only)."""

import torch
from dualpipe import DualPipe

torch.set_num_threads(1)
pipe = DualPipe()
for _ in range(4):
    pipe.step(torch.ones(8, 8), num_chunks=4)
print("trained 4 steps")
