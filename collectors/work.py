"""What each stage computes, counted once when a capture window opens: parameters and layers.

Analysis compares the durations of stages that have no peers by the work they hold
(``tracekit.analysis.work``). Counting is cheap (one pass over the module's parameters and
submodules, no tensor data read) and done once per stage module: the result is kept in a weak map,
so later steps, and a module that is freed, cost nothing. The fields are ``StageWork``'s
(``collectors.manifest``, the typed run.json schema).

- ``params``: every parameter of the stage module (shared parameters once);
- ``embedding_params``: those held by ``nn.Embedding``/``nn.EmbeddingBag`` (a lookup: analysis
  leaves them out of the compute work);
- ``layers``: the length of the stage's longest ``nn.ModuleList``/``nn.ModuleDict`` (its repeated
  blocks: a transformer's layers), else the number of leaf modules that hold parameters.

Imports torch and the standard library only; never raises (a module it cannot count gives None).
"""

from __future__ import annotations

import weakref
from typing import Any

from torch import nn

from collectors.files import report
from collectors.manifest import StageWork

_counted: weakref.WeakKeyDictionary[nn.Module, tuple[int, int, int]] = weakref.WeakKeyDictionary()
_stage_modules: dict[int, weakref.ref[nn.Module]] = {}
"""Global stage -> the module last counted for it: what ``collectors.memory`` weighs at the window's end."""


def stage_modules() -> dict[int, nn.Module]:
    """The stage modules counted in this process and still alive, by global stage."""
    alive = {stage: ref() for stage, ref in _stage_modules.items()}
    return {stage: module for stage, module in sorted(alive.items()) if module is not None}


def _count(module: nn.Module) -> tuple[int, int, int]:
    params = sum(p.numel() for p in module.parameters())
    embedding = sum(
        p.numel()
        for sub in module.modules()
        if isinstance(sub, (nn.Embedding, nn.EmbeddingBag))
        for p in sub.parameters(recurse=False)
    )
    blocks = [len(sub) for sub in module.modules() if isinstance(sub, (nn.ModuleList, nn.ModuleDict))]
    leaves = sum(
        1
        for sub in module.modules()
        if not any(True for _ in sub.children()) and any(True for _ in sub.parameters(recurse=False))
    )
    return params, embedding, max(blocks, default=0) or leaves


def stage_work(stage: int, module: Any) -> StageWork | None:
    """The work of ``module`` running global stage ``stage``; None (reported) when it cannot be counted."""
    try:
        counted = _counted.get(module)
        if counted is None:
            counted = _count(module)
            _counted[module] = counted
            _stage_modules[stage] = weakref.ref(module)
    except Exception as error:  # noqa: BLE001 - an exotic module must not stop training
        report(f"cannot count the work of stage {stage}: {error!r}")
        return None
    return StageWork(stage, *counted)
