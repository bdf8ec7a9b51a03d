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

MAX_PP = 1024
"""Most pipeline ranks a schedule is generated for: beyond any real pipeline, and a per-rank table
still prints in a moment."""
MAX_ACTIONS = 1 << 20
"""Most actions (ranks x stages per rank x micro-batches x 3 kinds) one schedule may hold: about
seven seconds and 0.9 GiB to simulate and write as JSON; the bound keeps a typo from eating the
machine's memory."""
BYTES_PER_ACTION = 960
"""Peak memory of ``tracekit simulate --format json`` per action (measured: 363 MiB for DualPipe's
396,256 actions at P=64, M=3072, ``benchmarks/simulate_speed.py``)."""


def generate(name: str, pp: int, microbatches: int, chunks: int | None = None) -> Schedule:
    """Build schedule ``name`` for ``pp`` ranks and ``microbatches`` micro-batches."""
    generator = GENERATORS.get(name)
    if generator is None:
        raise ScheduleError(f"unknown schedule {name!r}; known: {', '.join(GENERATORS)}")
    if generator.takes_chunks:
        chunks = DEFAULT_CHUNKS if chunks is None else chunks
        check_size(pp, microbatches, chunks)
        return generator.build(pp, microbatches, chunks)
    check_size(pp, microbatches, generator.fixed_chunks)
    if chunks is not None and chunks != generator.fixed_chunks:
        raise ScheduleError(
            f"{name} runs {generator.fixed_chunks} stage(s) per rank; --chunks {chunks} does not apply"
        )
    return generator.build(pp, microbatches)


def check_size(pp: int, microbatches: int, stages_per_rank: int = 1) -> None:
    """ScheduleError when a schedule of this size exceeds MAX_PP or MAX_ACTIONS."""
    if pp > MAX_PP:
        raise ScheduleError(f"--pp {pp} is more than the {MAX_PP} pipeline ranks tracekit simulates")
    actions = 3 * pp * max(stages_per_rank, 1) * microbatches
    if actions > MAX_ACTIONS:
        raise ScheduleError(
            f"pp {pp} x {max(stages_per_rank, 1)} stage(s) per rank x {microbatches} micro-batches is "
            f"{actions:,} actions (about {actions * BYTES_PER_ACTION / 2**30:.1f} GiB of memory), more than "
            f"the {MAX_ACTIONS:,} tracekit simulates; use fewer micro-batches"
        )
