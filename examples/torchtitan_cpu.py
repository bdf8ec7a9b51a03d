"""Run torchtitan 0.3.0's trainer on CPU with torch 2.13, for capturing a real torchtitan job here.

torchtitan 0.3.0 targets an accelerator and a newer torch: with no GPU its device is "cuda", its
memory monitor asks the device module for names and statistics, it calls
``schedule.step(arg_mbs=..., kwarg_mbs=..., target_mbs=...)`` and ``torch.distributed.set_timeout``
(neither is in torch 2.13), and its attention (FlexAttention) has no backward on CPU. This script
bridges exactly those, then runs ``torchtitan.train.main`` unchanged: the debug model's causal
attention by ``scaled_dot_product_attention``, the pre-split micro-batches fed to the schedule's
``_step_microbatches``, the timeout by ``_set_pg_timeout``. Start it under torchrun (docs/capture.md).

Not part of tracekit and not run by its tests (CI has no torchtitan); torchtitan itself is needed.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
import torch._utils
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.distributed.pipelining import schedules

torch._utils._get_available_device_type = lambda: "cpu"  # read by torchtitan.tools.utils at import
_CPU: Any = torch.cpu
_CPU.get_device_name = lambda *_args, **_kwargs: "cpu"
_CPU.get_device_properties = lambda *_args, **_kwargs: types.SimpleNamespace(
    total_memory=64 << 30, name="cpu"
)
_CPU.memory_stats = lambda *_args, **_kwargs: {
    "active_bytes.all.peak": 0, "active_bytes.all.current": 0, "reserved_bytes.all.peak": 0,
    "num_alloc_retries": 0, "num_ooms": 0,
}  # fmt: skip
_CPU.reset_peak_memory_stats = lambda *_args, **_kwargs: None
_CPU.empty_cache = lambda *_args, **_kwargs: None
_CPU.current_device = lambda: 0  # passed to barrier(device_ids=...), which wants an int
torch.set_num_threads(1)

if not hasattr(dist, "set_timeout"):  # lowers the timeout after step 1 (comm.train_timeout_seconds)
    dist.set_timeout = c10d._set_pg_timeout


def _accepting_microbatches(original: Callable[..., Any]) -> Callable[..., Any]:
    """``step`` taking torchtitan's pre-split micro-batches (``arg_mbs`` ...) on torch 2.13."""

    def step(
        self: Any,
        *args: Any,
        arg_mbs: Any = None,
        kwarg_mbs: Any = None,
        target_mbs: Any = None,
        **kwargs: Any,
    ) -> Any:
        if arg_mbs is None and kwarg_mbs is None and target_mbs is None:
            return original(self, *args, **kwargs)
        run = self._step_microbatches

        def given(_args: Any, _kwargs: Any, _targets: Any, *rest: Any, **named: Any) -> Any:
            return run(arg_mbs, kwarg_mbs, target_mbs, *rest, **named)

        self._step_microbatches = given
        try:
            return original(self, **kwargs)
        finally:
            del self._step_microbatches

    return step


for _cls in list(vars(schedules).values()):
    if isinstance(_cls, type) and issubclass(_cls, schedules._PipelineSchedule) and "step" in vars(_cls):
        _cls.step = _accepting_microbatches(vars(_cls)["step"])

from torchtitan.models.common import attention


def _causal_sdpa(
    self: Any, q_BLNH: torch.Tensor, k_BLNH: torch.Tensor, v_BLNH: torch.Tensor, **kwargs: Any
) -> Any:
    """The debug model's causal attention without FlexAttention (same names: torchtitan checks them)."""
    assert kwargs.get("score_mod") is None and kwargs.get("out_transform") is None
    out = torch.nn.functional.scaled_dot_product_attention(
        q_BLNH.transpose(1, 2), k_BLNH.transpose(1, 2), v_BLNH.transpose(1, 2),
        is_causal=True, scale=kwargs.get("scale"), enable_gqa=kwargs.get("enable_gqa", False),
    )  # fmt: skip
    return out.transpose(1, 2)


attention.FlexAttention.forward = _causal_sdpa

from torchtitan.train import main

if __name__ == "__main__":
    main()
