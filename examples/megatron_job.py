"""A tiny Megatron-core GPT trained with pipeline parallelism on CPU, to capture real Megatron traces.

Run it as ``python -m examples.megatron_job --ranks 2 --microbatches 4 --steps 3`` (1F1B) or
with ``--virtual-stages 2`` (interleaved 1F1B, two model chunks per rank). It spawns its own ranks
(torch.multiprocessing, gloo, one thread each), or runs as the rank torchrun made. The model is
megatron-core's own ``GPTModel`` with its local (non-Transformer-Engine) layer spec, trained
through the function ``get_forward_backward_func()`` returns, as Megatron's training loop does.
``--eval-step S`` also runs a forward-only call (``forward_only=True``, an evaluation) right after
training step S.

This is an example of a user's job, not part of the collector: it imports torch and megatron-core
and nothing from tracekit or collectors. megatron-core assumes CUDA; the shims that let it run on
CPU live here (``cpu_shims``), never in the collector, and change no installed file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from examples.launcher_store import hosted_store

VOCAB = 128
SEQUENCE = 32


@dataclass(frozen=True)
class MegatronJobConfig:
    """What to train: one value shared by every rank."""

    ranks: int
    """Pipeline ranks (processes)."""
    microbatches: int
    """Micro-batches per step."""
    steps: int
    """Training steps (calls of the forward-backward function)."""
    virtual_stages: int = 1
    """Model chunks per rank: 1 runs 1F1B, more run the interleaved schedule."""
    layers_per_stage: int = 1
    """Transformer layers per model chunk."""
    hidden: int = 64
    """Hidden size (4 attention heads)."""
    microbatch_size: int = 2
    """Sequences per micro-batch."""
    eval_step: int | None = None
    """Run one forward-only call right after this training step, or None."""

    def __post_init__(self) -> None:
        if self.ranks < 2:
            raise ValueError("a pipeline needs at least 2 ranks")
        if self.virtual_stages < 1 or self.steps < 1 or self.microbatches < 1:
            raise ValueError("--virtual-stages, --steps and --microbatches must be >= 1")
        if self.virtual_stages > 1 and self.microbatches % self.ranks:
            # Megatron's interleaved schedule runs micro-batches in groups of pp size per chunk.
            raise ValueError("the interleaved schedule needs --microbatches divisible by --ranks")
        if self.eval_step is not None and not 0 <= self.eval_step < self.steps:
            raise ValueError(f"--eval-step must be in 0..{self.steps - 1}")


class _CpuTorch(types.ModuleType):
    """``torch`` for megatron's schedules module, whose ``torch.zeros(..., device="cuda")`` lands on CPU."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return torch.zeros(*args, **kwargs)


class _CpuRngTracker:
    """Stands in for megatron's CUDA RNG states tracker; ``fork()`` keeps the CPU generator."""

    def fork(self, name: str | None = None) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def add(self, name: str, seed: int) -> None:
        return None

    def reset(self) -> None:
        return None

    def get_states(self) -> dict[str, Any]:
        return {}

    def set_states(self, states: dict[str, Any]) -> None:
        return None

    def is_initialized(self) -> bool:
        return True


def cpu_shims() -> None:
    """Let megatron-core 0.16 run on CPU, by monkeypatching (no installed file is edited).

    - ``torch.cuda.current_device()`` (p2p receive buffers, parameter placement): the CPU;
    - ``torch.zeros(..., device="cuda")`` in the schedules (token counters): the CPU;
    - the CUDA RNG tracker's ``fork()`` (dropout regions): a no-op on the CPU generator.

    Two more CUDA assumptions are met through the job's own inputs, not shims: the causal mask is
    passed explicitly (megatron's default one is built on "cuda"), and ``batch_p2p_sync`` is off
    (it calls ``torch.cuda.synchronize()``).
    """
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.tensor_parallel import random as megatron_random

    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    schedules.torch = _CpuTorch("torch")  # type: ignore[attr-defined]
    megatron_random._CUDA_RNG_STATE_TRACKER = _CpuRngTracker()
    megatron_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def _model_chunks(config: MegatronJobConfig) -> list[torch.nn.Module]:
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    virtual = config.virtual_stages if config.virtual_stages > 1 else None
    transformer = TransformerConfig(
        num_layers=config.layers_per_stage * config.ranks * config.virtual_stages,
        hidden_size=config.hidden,
        num_attention_heads=4,
        pipeline_dtype=torch.float32,
        pipeline_model_parallel_size=config.ranks,
        virtual_pipeline_model_parallel_size=virtual,
        use_cpu_initialization=True,
        batch_p2p_sync=False,
    )
    chunks = []
    for chunk in range(config.virtual_stages):
        vp_stage = chunk if virtual else None
        torch.manual_seed(1000 + chunk)
        chunks.append(
            GPTModel(
                config=transformer,
                transformer_layer_spec=get_gpt_layer_local_spec(),
                vocab_size=VOCAB,
                max_sequence_length=SEQUENCE,
                pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
                vp_stage=vp_stage,
            )
        )
    return chunks


def _batches(config: MegatronJobConfig, seed: int) -> Iterator[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    rows = config.microbatch_size
    while True:
        tokens = torch.randint(0, VOCAB, (rows, SEQUENCE), generator=generator)
        yield {
            "tokens": tokens,
            "labels": tokens.roll(-1, dims=1),
            "position_ids": torch.arange(SEQUENCE).expand(rows, SEQUENCE),
            "loss_mask": torch.ones(rows, SEQUENCE),
        }


_CAUSAL_MASK = torch.triu(torch.ones(SEQUENCE, SEQUENCE, dtype=torch.bool), diagonal=1)[None, None]
"""True above the diagonal: the positions a token may not attend to."""


def _loss(loss_mask: torch.Tensor, output: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    loss = (output.float().view(-1) * loss_mask.view(-1)).sum() / loss_mask.sum()
    return loss, {"lm loss": loss.detach()}


def _forward_step(data: Iterator[dict[str, torch.Tensor]], model: torch.nn.Module) -> tuple[Any, Callable]:
    batch = next(data)
    output = model(batch["tokens"], batch["position_ids"], _CAUSAL_MASK, labels=batch["labels"])
    return output, partial(_loss, batch["loss_mask"])


def make_trainer(config: MegatronJobConfig) -> Callable[[int], None]:
    """Build this rank's model chunks (process group up, shims applied); returns train(step)."""
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import get_forward_backward_func

    parallel_state.initialize_model_parallel(
        pipeline_model_parallel_size=config.ranks,
        virtual_pipeline_model_parallel_size=config.virtual_stages if config.virtual_stages > 1 else None,
    )
    chunks = _model_chunks(config)
    interleaved = config.virtual_stages > 1
    optimizer = torch.optim.SGD([p for chunk in chunks for p in chunk.parameters()], lr=1e-3)

    def run(step: int, forward_only: bool) -> None:
        # Fetched per call, as Megatron's own training loop does.
        forward_backward = get_forward_backward_func()
        data = _batches(config, seed=step)
        forward_backward(
            forward_step_func=_forward_step,
            data_iterator=[data] * len(chunks) if interleaved else data,
            model=chunks if interleaved else chunks[0],
            num_microbatches=config.microbatches,
            seq_length=SEQUENCE,
            micro_batch_size=config.microbatch_size,
            forward_only=forward_only,
        )

    def train(step: int) -> None:
        optimizer.zero_grad()
        run(step, forward_only=False)
        optimizer.step()
        if step == config.eval_step:
            with torch.no_grad():
                run(10_000 + step, forward_only=True)

    return train


def _train(rank: int, world_size: int, config: MegatronJobConfig) -> None:
    torch.set_num_threads(1)
    # "Apex is not installed", "TE is not installed": megatron's optional fused kernels, not needed here.
    warnings.filterwarnings("ignore", category=UserWarning, module="megatron")
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        cpu_shims()
        train = make_trainer(config)
        for step in range(config.steps):
            train(step)
    finally:
        dist.destroy_process_group()


def run_job(config: MegatronJobConfig) -> int:
    """Train under torchrun (RANK/WORLD_SIZE set) or spawn ``config.ranks`` ranks; returns an exit status."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        _train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), config)
        return 0
    try:
        with hosted_store():
            mp.spawn(_train, args=(config.ranks, config), nprocs=config.ranks, join=True)
    except (mp.ProcessExitedException, mp.ProcessRaisedException) as error:
        print(f"megatron_job: a rank failed:\n{error}", file=sys.stderr)
        return 1
    return 0


def parse_args(argv: Sequence[str] | None = None) -> MegatronJobConfig:
    """Command-line arguments to a MegatronJobConfig."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.megatron_job", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--virtual-stages", type=int, default=1, help="model chunks per rank (>1: interleaved)"
    )
    parser.add_argument("--layers-per-stage", type=int, default=MegatronJobConfig.layers_per_stage)
    parser.add_argument("--eval-step", type=int, default=None, help="a forward-only call after this step")
    args = parser.parse_args(argv)
    try:
        return MegatronJobConfig(
            ranks=args.ranks,
            microbatches=args.microbatches,
            steps=args.steps,
            virtual_stages=args.virtual_stages,
            layers_per_stage=args.layers_per_stage,
            eval_step=args.eval_step,
        )
    except ValueError as error:
        parser.error(str(error))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m examples.megatron_job``."""
    return run_job(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
