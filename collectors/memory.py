"""What a rank's model state takes, weighed once as its trace is written: the sidecar's ``memory``.

The profiler's memory events (``profile_memory=True``, one ``[memory]`` instant per allocation and
free in the window) say how much is allocated over time; they cannot say what was allocated before
the window opened (on CPU, ``Total Allocated`` counts from the profiler's start), nor what the
bytes are. This module weighs the parts that live across steps, per stage module the patches
counted (``collectors.work.stage_modules``):

- ``param_bytes``: the parameters' data;
- ``grad_bytes``: one gradient per parameter that requires grad, at the parameter's dtype;
- ``optimizer_bytes``: the tensors every live ``torch.optim.Optimizer`` keeps in its ``state`` for
  those parameters (momentum, Adam's moments), found once with ``gc.get_objects``.

Called after the profiler stopped, so the walk costs no captured step anything. Imports torch and
the standard library only; never raises (a rank it cannot weigh gets no stages, reported).
Not for: the timeline of allocations (the trace's memory events, read by ``tracekit.trace.memory_events``).
"""

from __future__ import annotations

import gc

import torch
from torch import nn

from collectors.files import report
from collectors.manifest import RankMemory, StageMemory
from collectors.work import stage_modules


def _tensor_bytes(value: object) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def _optimizer_state_bytes() -> dict[int, int]:
    """id(parameter) -> bytes of the tensors the live optimizers keep for it."""
    held: dict[int, int] = {}
    # type(), not isinstance(): isinstance reads __class__, which some module proxies (torch's
    # deprecated ``distributed.reduce_op``) answer with a warning.
    optimizers = [obj for obj in gc.get_objects() if issubclass(type(obj), torch.optim.Optimizer)]
    for obj in optimizers:
        for parameter, state in obj.state.items():
            values = state.values() if isinstance(state, dict) else ()
            held[id(parameter)] = held.get(id(parameter), 0) + sum(_tensor_bytes(v) for v in values)
    return held


def _stage(stage: int, module: nn.Module, optimizer: dict[int, int]) -> StageMemory:
    parameters = list(module.parameters())
    return StageMemory(
        stage=stage,
        params=sum(p.numel() for p in parameters),
        param_bytes=sum(_tensor_bytes(p) for p in parameters),
        grad_bytes=sum(_tensor_bytes(p) for p in parameters if p.requires_grad),
        optimizer_bytes=sum(optimizer.get(id(p), 0) for p in parameters),
    )


def device_of(modules: dict[int, nn.Module]) -> tuple[str, int | None]:
    """(device name, its capacity in bytes) of the first stage module's parameters; CPU has no capacity."""
    for module in modules.values():
        for parameter in module.parameters():
            device = parameter.device
            if device.type == "cuda":
                index = device.index if device.index is not None else torch.cuda.current_device()
                return f"cuda:{index}", int(torch.cuda.get_device_properties(index).total_memory)
            return str(device), None
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        return f"cuda:{index}", int(torch.cuda.get_device_properties(index).total_memory)
    return "cpu", None


def rank_memory(profile_memory: bool) -> RankMemory | None:
    """This rank's memory facts for its sidecar; None (reported) when they cannot be weighed."""
    try:
        modules = stage_modules()
        optimizer = _optimizer_state_bytes() if modules else {}
        device, capacity = device_of(modules)
        stages = tuple(_stage(stage, module, optimizer) for stage, module in modules.items())
        return RankMemory(profile_memory, device, capacity, stages)
    except Exception as error:  # noqa: BLE001 - an exotic module or optimizer must not stop training
        report(f"cannot weigh the stages' memory: {error!r}")
        return None
