"""DualPipe's commit program against DeepSeek's own code: the same sends and receives at the same commits.

The reference is the real ``step`` of dualpipe 1.0.0's ``DualPipe`` and of upstream's
``DualPipeV`` (../shared), run with their compute and point-to-point calls recorded instead of
run (as tests/schedule/reference_orders.py does for the order): the queueing, the counters and
``_commit_and_wait_comm``'s place are the source's own.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from dualpipe import DualPipe, WeightGradStore
from dualpipe import comm as dualpipe_comm

from tracekit.whatif.commit_and_wait import ActionKey, RankProgram, commit_program

UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "third_party" / "dualpipe-upstream"
UPSTREAM_DUALPIPEV = UPSTREAM / "dualpipe" / "dualpipev.py"
"""Upstream DualPipeV (the PyPI release predates it), read in place beside the checkout."""


def _upstream_dualpipev() -> type:
    spec = importlib.util.spec_from_file_location("tracekit_commit_dualpipev", UPSTREAM_DUALPIPEV)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DualPipeV


def _recorded_program(
    base: type, rank: int, ranks: int, chunks: int, monkeypatch: pytest.MonkeyPatch
) -> RankProgram:
    """Run ``base.step`` on pipeline rank ``rank``; record its compute and the commit of each transfer."""
    v_shaped = base.__name__ == "DualPipeV"
    half = chunks // 2

    class Recording(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            torch.nn.Module.__init__(self)  # the constructors need CUDA modules
            self.batch_dim, self.num_ranks, self.rank = 0, ranks, rank
            self.prev_rank, self.next_rank, self.group = rank - 1, rank + 1, None
            self.is_first_rank, self.is_last_rank = rank == 0, rank == ranks - 1
            self.is_in_second_half = rank >= ranks // 2
            self.is_middle_rank = rank in (ranks // 2 - 1, ranks // 2)
            self.actions: list[ActionKey] = []
            self.sends: dict[ActionKey, int] = {}
            self.receives: dict[ActionKey, int] = {}
            self.held: list[ActionKey] = []

        def key(self, kind: str, direction: int, chunk: int) -> ActionKey:
            stage = rank if direction == 0 else 2 * ranks - 1 - rank
            return kind, stage, chunk if v_shaped or direction == 0 else half + chunk

        def direction(self, phase: int) -> int:
            return phase if v_shaped else phase ^ self.is_in_second_half

        def _forward_compute_chunk(self, phase: int) -> None:
            direction = self.direction(phase)
            self.actions.append(self.key("F", direction, self.current_f_chunk_id[direction]))
            self.current_f_chunk_id[direction] += 1
            self.output_chunks[direction].append([torch.zeros(1)])
            if self.actions[-1][1] in ((2 * ranks - 1,) if v_shaped else (ranks - 1, 2 * ranks - 1)):
                self.loss_chunks.append(torch.zeros(()))  # step() stacks the last stages' losses

        def _backward_compute_chunk(self, phase: int, enable_zb: bool = False) -> None:
            direction = self.direction(phase)
            self.actions.append(self.key("B", direction, self.current_b_chunk_id[direction]))
            self.current_b_chunk_id[direction] += 1
            self.input_grad_chunks[direction].append([torch.zeros(1)])
            if enable_zb:
                self.held.append(self.actions[-1])
                WeightGradStore.funcs_queue.put([])

        def _forward_backward_compute_chunk(self, phase0: int, phase1: int) -> None:
            self._forward_compute_chunk(phase0)
            self._backward_compute_chunk(phase1)

        def _commit_and_wait_comm(self) -> None:
            for what, key in self.comm_ops:
                (self.sends if what == "send" else self.receives)[key] = len(self.actions)
            self.comm_ops = []

    pipe = Recording()
    counters = (
        "current_send_f_chunk_id",
        "current_send_b_chunk_id",
        "current_recv_f_chunk_id",
        "current_recv_b_chunk_id",
    )
    seen: dict[str, list[int]] = {}

    def transfer(ops: list[Any]) -> None:
        # The source advances the transfer's counter just before it queues it: that counter names it.
        for name in counters:
            now = getattr(pipe, name)
            for direction in (0, 1):
                if now[direction] != seen.get(name, [0, 0])[direction]:
                    kind = "F" if "_f_" in name else "B"
                    what = "send" if "send" in name else "recv"
                    ops.append((what, pipe.key(kind, direction, now[direction] - 1)))
            seen[name] = list(now)

    def append_irecv(ops: list[Any], src: int, group: Any) -> list[Any]:
        transfer(ops)
        return []

    def append_isend(ops: list[Any], tensors: list[Any], dst: int, group: Any) -> None:
        transfer(ops)

    def pop() -> None:
        WeightGradStore.funcs_queue.get()
        _, stage, microbatch = pipe.held.pop(0)
        pipe.actions.append(("W", stage, microbatch))

    monkeypatch.setattr(dualpipe_comm, "append_irecv", append_irecv)
    monkeypatch.setattr(dualpipe_comm, "append_isend", append_isend)
    monkeypatch.setattr(dualpipe_comm, "TENSOR_SHAPES", [(1,)])
    monkeypatch.setattr(dualpipe_comm, "TENSOR_DTYPE", torch.float32)
    monkeypatch.setattr(WeightGradStore, "pop", pop)
    pipe.step(torch.zeros(chunks, 1), num_chunks=chunks, criterion=lambda *_: torch.zeros(()))
    return RankProgram(tuple(pipe.actions), pipe.sends, pipe.receives)


@pytest.mark.parametrize(("ranks", "chunks"), [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16)])
def test_dualpipe_posts_each_transfer_where_deepseeks_step_does(
    ranks: int, chunks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    programs = commit_program(ranks, chunks, v_shaped=False)
    for rank in range(ranks):
        assert programs[rank] == _recorded_program(DualPipe, rank, ranks, chunks, monkeypatch)


@pytest.mark.skipif(not UPSTREAM_DUALPIPEV.is_file(), reason=f"needs upstream DualPipeV at {UPSTREAM}")
@pytest.mark.parametrize(("ranks", "chunks"), [(2, 4), (4, 8), (4, 12), (3, 10)])
def test_dualpipev_posts_each_transfer_where_upstreams_step_does(
    ranks: int, chunks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _upstream_dualpipev()
    programs = commit_program(ranks, chunks, v_shaped=True)
    for rank in range(ranks):
        assert programs[rank] == _recorded_program(base, rank, ranks, chunks, monkeypatch)
