"""Schedule names, as the command line spells them, mapped to their generators."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracekit.schedule.dualpipe import dualpipe, dualpipev
from tracekit.schedule.gpipe import gpipe
from tracekit.schedule.interleaved_1f1b import interleaved_1f1b
from tracekit.schedule.model import Schedule, ScheduleError
from tracekit.schedule.one_f_one_b import one_f_one_b, zb_h1
from tracekit.schedule.zb_h2 import zb_h2
from tracekit.schedule.zbv import zbv


@dataclass(frozen=True)
class Generator:
    """A schedule generator and what it accepts."""

    build: Callable[..., Schedule]
    """``build(pp, microbatches)``, plus ``chunks`` when ``takes_chunks``."""
    takes_chunks: bool = False
    """True when the number of stages per rank is a free parameter (interleaved-1f1b)."""
    fixed_chunks: int = 1
    """Stages per rank when not free: 2 for the V shapes, 1 otherwise (DualPipe's copies are one)."""
    planned: bool = True
    """True when the planner compares it; GPipe is left out (it holds every micro-batch's activations)."""
    pairs_forward_backward: bool = False
    """True when it overlaps a forward with a backward chunk (DeepSeek-V3, section 3.2.1)."""


GENERATORS: dict[str, Generator] = {
    "gpipe": Generator(gpipe, planned=False),
    "1f1b": Generator(one_f_one_b),
    "interleaved-1f1b": Generator(interleaved_1f1b, takes_chunks=True),
    "zb-h1": Generator(zb_h1),
    "zb-h2": Generator(zb_h2),
    "zbv": Generator(zbv, fixed_chunks=2),
    "dualpipe": Generator(dualpipe, pairs_forward_backward=True),
    "dualpipev": Generator(dualpipev, fixed_chunks=2, pairs_forward_backward=True),
}
"""Every schedule the simulator can generate, by name."""

DEFAULT_CHUNKS = 2
"""Stages per rank of interleaved-1f1b when ``--chunks`` is not given."""


def generate(name: str, pp: int, microbatches: int, chunks: int | None = None) -> Schedule:
    """Build schedule ``name`` for ``pp`` ranks and ``microbatches`` micro-batches."""
    generator = GENERATORS.get(name)
    if generator is None:
        raise ScheduleError(f"unknown schedule {name!r}; known: {', '.join(GENERATORS)}")
    if generator.takes_chunks:
        return generator.build(pp, microbatches, DEFAULT_CHUNKS if chunks is None else chunks)
    if chunks is not None and chunks != generator.fixed_chunks:
        raise ScheduleError(
            f"{name} runs {generator.fixed_chunks} stage(s) per rank; --chunks {chunks} does not apply"
        )
    return generator.build(pp, microbatches)
