"""The choices each part of a run's analysis takes, as plain frozen dataclasses, apart from the code.

``IdealConfig`` (``tracekit.analysis.ideal``), ``WhatIfConfig`` (``tracekit.whatif.attribution``),
``StragglerConfig`` (``tracekit.stragglers.scoring``), ``LinkConfig``
(``tracekit.stragglers.links``) and ``PipelineLayout`` (``tracekit.analysis.pipelines``) live here,
with the sentences that define the two ideals, so that ``AnalysisConfig`` and the commands' options
(built from these fields) load no polars, numpy or what-if code: a command that never computes the
ideal or the stragglers never imports them, and one whose result is stored imports no analysis at
all. Each module named above re-exports its own config.

Not for: anything that computes; what each choice means for a figure is written where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IDEAL_DEFINITION = (
    "each op at the lower of its rank's median and the median of the other ranks doing the same work "
    "(else the expected cost of its stage's work, else the other ranks' median for the op type), replayed "
    "through the run's recorded dependency graph, each op starting its recorded gap after what it waits for"
)
"""The one sentence every output quotes for the ideal of a captured run (``method="robust"``)."""

OSDI25_DEFINITION = (
    "osdi25: each op type's mean (compute) or median (communication) over the whole run, replayed "
    "through the recorded dependency graph"
)
"""The sentence quoted for ``method="osdi25"`` (the OSDI'25 artifact's ideal; op-tables' default)."""

IdealMethod = Literal["robust", "osdi25"]

Replay = Literal["recorded", "durations"]
REPLAYS: tuple[Replay, ...] = ("recorded", "durations")
"""How ops occupy the replay: with their recorded gaps (the measured step), or durations alone."""


@dataclass(frozen=True)
class IdealConfig:
    """How the ideal durations are taken."""

    method: IdealMethod | None = None
    """``robust``: the lower of the rank's own median and its reference (``IDEAL_DEFINITION``);
    ``osdi25``: the OSDI'25 artifact's means; None: ``osdi25`` for op-tables, ``robust`` for runs."""

    def __post_init__(self) -> None:
        if self.method not in (None, "robust", "osdi25"):
            raise ValueError(f"ideal method must be robust or osdi25, got {self.method!r}")

    def method_for(self, source: str) -> IdealMethod:
        """The method used for a run read from ``source`` (``op-table``, ``kineto``, ...)."""
        if self.method is not None:
            return self.method
        return "osdi25" if source == "op-table" else "robust"


@dataclass(frozen=True)
class WhatIfConfig:
    """Choices of the what-if analysis."""

    worker_fraction: float = 0.03
    """M_W fixes this share of workers, rounded up, with the highest worker scores (artifact: 3%)."""
    replay: Replay = "recorded"
    """``recorded``: every op its duration plus its recorded gap (the measured step); ``durations``:
    durations alone, the OSDI'25 artifact's replay."""

    def __post_init__(self) -> None:
        if not 0 < self.worker_fraction <= 1:
            raise ValueError("worker_fraction must be in (0, 1]")
        if self.replay not in REPLAYS:
            raise ValueError(f"replay must be one of {', '.join(REPLAYS)}, got {self.replay!r}")


@dataclass(frozen=True)
class StragglerConfig:
    """Thresholds of straggler scoring."""

    threshold: float = 0.75
    """Flag a rank whose score (reference / own duration) is below this (nvidia-resiliency-ext: 0.75)."""
    min_saving_share: float = 0.05
    """Flag only when reference speed would save at least this share of the measured step time."""
    persistent_share: float = 0.5
    """Slow in more than this share of steps: persistent; slow in fewer (but some): one-off."""

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        if not 0 <= self.min_saving_share < 1:
            raise ValueError("min_saving_share must be in [0, 1)")
        if not 0 < self.persistent_share <= 1:
            raise ValueError("persistent_share must be in (0, 1]")


@dataclass(frozen=True)
class LinkConfig:
    """Thresholds of communication-straggler detection."""

    min_excess_ms: float = 3.0
    """Flag a link whose median exposed latency is at least this much above the other links' (ms)."""
    min_ratio: float = 2.0
    """Flag a link only when its latency is also at least this many times the other links'."""
    min_saving_share: float = 0.05
    """Flag a link only when the reference latency would save at least this share of the step."""
    persistent_share: float = 0.5
    """Flag a link only when it is slow in more than this share of the steps."""

    def __post_init__(self) -> None:
        if self.min_excess_ms <= 0:
            raise ValueError("min_excess_ms must be > 0")
        if self.min_ratio < 1:
            raise ValueError("min_ratio must be >= 1")
        if not 0 <= self.min_saving_share < 1:
            raise ValueError("min_saving_share must be in [0, 1)")
        if not 0 < self.persistent_share <= 1:
            raise ValueError("persistent_share must be in (0, 1]")


LAYOUT_ORDERS = ("contiguous", "strided")
"""How a layout places pipelines on ranks (module docstring)."""

LAYOUT_HELP = (
    "How ranks form data-parallel replicas of the pipeline when run.json does not name its pipeline "
    "groups: contiguous:P (ranks d*P..d*P+P-1 are replica d) or strided:P (ranks d, d+D, d+2D... are "
    "replica d, D = ranks / P, as Megatron-core lays them out); overrides run.json's groups."
)
"""The ``--pipelines`` option's help, the same on every command."""


@dataclass(frozen=True)
class PipelineLayout:
    """A regular layout of P-rank pipelines over the ranks: ``contiguous:P`` or ``strided:P``."""

    order: Literal["contiguous", "strided"]
    """``contiguous``: a pipeline's ranks are consecutive; ``strided``: they are world size / P apart."""
    pp: int
    """Pipeline ranks per replica."""

    def __post_init__(self) -> None:
        if self.order not in LAYOUT_ORDERS:
            raise ValueError(f"pipeline layout {self.order!r} is not one of {', '.join(LAYOUT_ORDERS)}")
        if self.pp < 1:
            raise ValueError(f"a pipeline needs at least one rank, not {self.pp}")

    @classmethod
    def parse(cls, text: str) -> PipelineLayout:
        """``contiguous:4`` -> PipelineLayout; ValueError saying what is expected."""
        order, sep, pp = text.strip().partition(":")
        if not sep or order not in LAYOUT_ORDERS or not pp.isdigit():
            raise ValueError(f"expected contiguous:P or strided:P (P pipeline ranks), not {text!r}")
        return cls(order, int(pp))  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.order}:{self.pp}"

    def groups(self, world_size: int) -> tuple[tuple[int, ...], ...]:
        """The pipeline groups of a ``world_size``-rank run; ValueError when P does not divide it."""
        if world_size % self.pp:
            raise ValueError(f"{world_size} ranks do not form pipelines of {self.pp} ranks")
        replicas = world_size // self.pp
        if self.order == "contiguous":
            return tuple(tuple(range(d * self.pp, (d + 1) * self.pp)) for d in range(replicas))
        return tuple(tuple(range(d, world_size, replicas)) for d in range(replicas))
