"""Patch pipeline schedules right after their modules are imported, without importing them first.

A meta-path finder watches for the modules in ``PATCHES``; when one is imported it runs the module
as usual and then hands it to its patch function. Nothing else is touched: other imports pass
through a dict lookup. This keeps the injected sitecustomize cheap (no torch import at start-up)
and works whether the job imports torch's pipelining before or after the capture starts.

Not for the patches themselves (``collectors.patch_torch``, ``collectors.patch_dualpipe``,
``collectors.patch_megatron``) nor for
deciding what to capture (``collectors.capture``). Standard library only.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, TypeVar

from collectors.files import report

PATCHES: dict[str, str] = {
    "torch.distributed.pipelining.schedules": "collectors.patch_torch",
    "dualpipe.dualpipe": "collectors.patch_dualpipe",
    "dualpipe.dualpipev": "collectors.patch_dualpipe",
    "megatron.core.pipeline_parallel.schedules": "collectors.patch_megatron",
}
"""Watched module -> the collectors module whose ``patch(module)`` labels it."""

RECOGNIZED: tuple[str, ...] = (
    (
        "torch.distributed.pipelining schedules (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, "
        "ScheduleLoopedBFS, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV, "
        "the CSV runtime)"
    ),
    "DeepSeek's DualPipe and DualPipeV (package dualpipe)",
    "Megatron-core's 1F1B and interleaved schedules (get_forward_backward_func() with pipeline size > 1)",
)
"""What the patches above recognize, in words: what ``tracekit record`` lists when nothing was captured."""

_patched: set[str] = set()
_ORIGINAL = "__tracekit_original__"
_problems: list[str] = []
T = TypeVar("T")


def problems() -> tuple[str, ...]:
    """What the collector met in this process patching or labelling (each rank's sidecar lists them)."""
    return tuple(_problems)


def note_problem(problem: str) -> None:
    """Record (once) and report a problem the collector met; it goes into the rank's sidecar."""
    if problem not in _problems:
        _problems.append(problem)
        report(problem)


class Guard:
    """A wrapper's own safety switch: after its first failure the wrapper only calls through.

    Labelling reads library internals (keyword names, attributes) that a newer torch or DualPipe
    may rename; such a failure must never reach the training job.
    """

    def __init__(self, original: Callable[..., Any]) -> None:
        self.where = getattr(original, "__qualname__", repr(original))
        self.on = True

    def attempt(self, compute: Callable[[], T]) -> T | None:
        """``compute()``, or None once it has raised (labelling of this method is then off for good)."""
        if not self.on:
            return None
        try:
            return compute()
        except Exception as error:  # noqa: BLE001 - an unknown library version must not stop training
            self.on = False
            note_problem(
                f"labelling of {self.where} switched off: {error!r} (its library differs from the version "
                "tracekit knows); its actions are not labelled"
            )
            return None


def wrap_attribute(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace ``owner.name`` by ``make(original)``, once: a second call finds the wrapper and stops."""
    original = getattr(owner, name)
    if hasattr(original, _ORIGINAL):
        return
    # updated=(): the original may be a class (record_function), whose __dict__ must not be copied.
    wrapper = functools.update_wrapper(make(original), original, updated=())
    setattr(wrapper, _ORIGINAL, original)
    setattr(owner, name, wrapper)


def apply_patch(name: str, module: ModuleType) -> None:
    """Run the patch for watched module ``name`` once; a failing patch is reported, never raised."""
    if name in _patched:
        return
    _patched.add(name)
    try:
        importlib.import_module(PATCHES[name]).patch(module)
    except Exception as error:  # noqa: BLE001 - an unexpected library version must not stop training
        note_problem(f"could not patch {name} ({error!r}); its actions will not be labelled")


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the patch; everything else (get_source, ...) goes to the real one."""

    def __init__(self, loader: importlib.abc.Loader, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        apply_patch(self._name, module)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._loader, attribute)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds watched modules through the other finders and wraps their loader."""

    def __init__(self) -> None:
        self._resolving: set[str] = set()

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in PATCHES or fullname in self._resolving:
            return None
        self._resolving.add(fullname)
        try:
            # Asks every finder, this one included; _resolving makes this one step aside.
            spec = importlib.util.find_spec(fullname)
        finally:
            self._resolving.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, fullname)
        return spec


def install() -> None:
    """Watch the modules in PATCHES (idempotent); patch those already imported now."""
    if not any(isinstance(finder, _PatchAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())
    for name in PATCHES:
        module = sys.modules.get(name)
        if module is not None:
            apply_patch(name, module)
