"""The DeepSeek DualPipe parts of the example job (``examples.pipeline_job``): what its stages need.

DualPipe's zero-bubble steps defer weight gradients (``DeferredWeightLinear``), its F&B hook
(``overlapped_forward_backward``) and its step function with the two CPU shims DualPipe needs
(``dualpipe_step_fn``). A user's job, not the collector: it imports torch and ``dualpipe`` only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class DeferredWeightLinearFn(torch.autograd.Function):
    """y = x W^T + b whose weight gradient DualPipe may defer to a later W action (WeightGradStore)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.bias = bias
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        from dualpipe import WeightGradStore

        x, weight = ctx.saved_tensors
        bias = ctx.bias

        def weight_grad() -> None:
            for param, value in ((weight, grad.t() @ x), (bias, grad.sum(0))):
                param.grad = value if param.grad is None else param.grad + value

        # DualPipe's zero-bubble steps switch WeightGradStore on: the input gradient goes upstream
        # now (I) and the weight gradient runs when DualPipe pops it (W), as in DeepSeek's example.
        if WeightGradStore.enabled:
            WeightGradStore.put(weight_grad)
        else:
            weight_grad()
        return grad @ weight, None, None


class DeferredWeightLinear(nn.Linear):
    """nn.Linear through DeferredWeightLinearFn."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return DeferredWeightLinearFn.apply(x, self.weight, self.bias)


def overlapped_forward_backward(
    cls: type,
    module0: nn.Module,
    inputs0: list[torch.Tensor],
    criterion0: Callable[..., torch.Tensor] | None,
    labels0: list[torch.Tensor],
    module1: nn.Module,
    loss1: torch.Tensor | None,
    outputs1: list[torch.Tensor],
    output_grads1: list[torch.Tensor],
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """DualPipe's F&B hook: the forward, then the backward, in one call (a GPU would interleave them)."""
    outputs0 = [module0(*inputs0)]
    loss0 = criterion0(*outputs0, *labels0) if criterion0 is not None else None
    if loss1 is not None:
        loss1.backward()
        loss1.detach_()
    else:
        # DualPipe has already freed the storage of sent outputs; its run_backward skips the
        # shape check that torch.autograd.backward would fail on, as DeepSeek's example does.
        from dualpipe.utils import run_backward

        run_backward(outputs1, output_grads1)
    return outputs0, loss0


def dualpipe_step_fn(
    config: Any,
    rank: int,
    modules: list[nn.Module],
    batch: Callable[[Any, int, int], tuple[torch.Tensor, torch.Tensor]],
    group: Any = None,
) -> Callable[[int, bool], None]:
    """Wrap pipeline rank ``rank``'s two stage modules in DualPipe (or DualPipeV) over process group
    ``group`` (None: the default group); returns run(step, forward_only)."""
    import dualpipe
    import dualpipe.comm

    v_shaped = config.schedule == "deepseek-dualpipev"
    if v_shaped and not hasattr(dualpipe, "DualPipeV"):
        raise RuntimeError(
            f"dualpipe at {dualpipe.__file__} has no DualPipeV (PyPI 1.0.0 predates it): put DeepSeek's "
            "upstream DualPipe on PYTHONPATH"
        )
    # Shim 1: DualPipe's constructor asserts the modules sit on torch.cuda.current_device().
    real_current_device = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    try:
        pipe = (dualpipe.DualPipeV if v_shaped else dualpipe.DualPipe)(
            (modules[0], modules[1]), process_group=group
        )
    finally:
        torch.cuda.current_device = real_current_device
    # Shim 2: its receive buffers are allocated on "cuda"; allocate them on the CPU instead.
    dualpipe.comm.build_from_tensor_shapes = lambda: [
        torch.empty(shape, dtype=dualpipe.comm.TENSOR_DTYPE, requires_grad=True)
        for shape in dualpipe.comm.TENSOR_SHAPES
    ]
    dualpipe.set_p2p_tensor_shapes([(config.microbatch_rows, config.hidden)])
    dualpipe.set_p2p_tensor_dtype(torch.float32)
    # DualPipe: each direction carries half the micro-batches; rank 0 feeds one, rank P-1 the other.
    # DualPipeV: rank 0 feeds every micro-batch and computes the loss (its V turns back to rank 0).
    feeds = rank == 0 if v_shaped else rank in (0, config.ranks - 1)
    rows = config.microbatches // (1 if v_shaped else 2) * config.microbatch_rows

    def run(step: int, forward_only: bool) -> None:
        x, y = batch(config, step * 2 + (rank == config.ranks - 1), rows)
        # DualPipe runs forward-only (an evaluation) when gradients are off.
        with torch.no_grad() if forward_only else contextlib.nullcontext():
            if feeds:
                pipe.step(x, num_chunks=config.microbatches, criterion=F.mse_loss, labels=(y,))
            else:
                pipe.step(num_chunks=config.microbatches)

    return run
