"""The step window of a capture: which training steps, written ``A:B``, ``A:`` or ``all``.

A step is one call of a pipeline schedule's ``step()`` (or one ``collectors.step()`` block),
counted from 0 in each process. Standard library only, so ``tracekit record`` can validate
``--steps`` without importing torch.
"""

from __future__ import annotations

DEFAULT_STEPS = "1:3"
"""Steps 1 and 2: step 0 carries one-off work (shape inference, communicator set-up, allocator
warm-up) that would distort what a steady step looks like; two steps allow step-to-step comparison."""


def parse_steps(text: str) -> tuple[int, int | None]:
    """``"A:B"`` (half-open, 0-based), ``"A:"`` (from A to the end of the job) or ``"all"``."""
    text = text.strip()
    if text == "all":
        return 0, None
    first, sep, stop = text.partition(":")
    if not sep or not first.strip().isdigit() or (stop.strip() and not stop.strip().isdigit()):
        raise ValueError(f"bad step range {text!r}: expected A:B (e.g. 1:3), A: or all")
    first_step, stop_step = int(first), int(stop) if stop.strip() else None
    if stop_step is not None and stop_step <= first_step:
        raise ValueError(f"empty step range {text!r}: B must be greater than A")
    return first_step, stop_step
