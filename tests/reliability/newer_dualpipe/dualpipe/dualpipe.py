"""``DualPipe`` as a newer release might spell it: chunk counters renamed, an extra argument.

1.0.0 keeps ``current_f_chunk_id`` / ``current_b_chunk_id`` lists and calls
``_forward_compute_chunk(phase)``; this one keeps ``chunk_counters`` and passes a ``chunk`` too.
Its ``step`` computes real matrix products so the profiler has something to record.
"""

from __future__ import annotations

import torch


class DualPipe:
    """One process, two phases, ``num_chunks`` chunks per step: enough for the collector to wrap."""

    def __init__(self) -> None:
        self.chunk_counters = {"forward": [0, 0], "backward": [0, 0]}
        self.forward_only = False
        self.comm_ops: list[object] = []
        self.weight = torch.ones(32, 32)

    def _forward_compute_chunk(self, phase: int, chunk: int) -> None:
        self.chunk_counters["forward"][phase] = chunk + 1
        self.activation = torch.tanh(self.weight @ self.weight)

    def _backward_compute_chunk(self, phase: int, chunk: int, enable_zb: bool = False) -> None:
        self.chunk_counters["backward"][phase] = chunk + 1
        self.activation = self.activation @ self.weight

    def _commit_and_wait_comm(self) -> None:
        self.comm_ops = []

    def step(self, *inputs: torch.Tensor, num_chunks: int = 0) -> None:
        for chunk in range(num_chunks // 2):
            for phase in (0, 1):
                self._forward_compute_chunk(phase, chunk)
                self._backward_compute_chunk(phase, chunk)
                self._commit_and_wait_comm()
