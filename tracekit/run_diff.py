"""Two runs of the same job set side by side: what changed, priced in step time (``tracekit diff``).

``diff(base, new)`` opens (or takes) two ``RunAnalysis`` and returns a ``RunDiff``, whose parts are
computed on first use from the two analyses' frames, each by a module of ``tracekit.changes``:

    shapes -> comparability (refused, or compared per stage and kind)
      -> step times and their change against the noise band (``steps``), and the host's part
         of it: how long the ranks waited for a CPU core in each (``host``)
      -> the change decomposed by counterfactual replay of NEW (``explain``, ``transfers``)
      -> new and vanished work, per-rank bubble and overlap changes (``work``)

``tracekit diff``, ``tracekit dashboard NEW --baseline BASE`` and ``tracekit.present.diff`` read
only this object.

Not for: computing any figure itself (the modules named), or presenting it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.changes.explain import Explanation, Transfers, explain
from tracekit.changes.host import HostChange, host_change, host_wait_ms
from tracekit.changes.shape import RANK_KEY, Comparability, RunShape, comparability
from tracekit.changes.steps import NoiseConfig, StepChange, step_change, step_spans, steps_frame
from tracekit.changes.transfers import transfers
from tracekit.changes.work import new_and_vanished, rank_changes
from tracekit.run_analysis import RunAnalysis, analyse
from tracekit.whatif.case import ReplayCase


@dataclass(frozen=True)
class DiffConfig:
    """Every choice a diff makes."""

    noise: NoiseConfig = field(default_factory=NoiseConfig)
    """The noise band of the step-time change (``tracekit.changes.steps``)."""
    allow_different: bool = False
    """Compare runs whose schedule, depth, world size, micro-batches or layout differ, per stage and kind."""


def shape_of(analysis: RunAnalysis) -> RunShape:
    """What makes ``analysis`` comparable op for op with another run (``tracekit.changes.shape``)."""
    facts = analysis.facts
    ops = analysis.case.ops if analysis.is_optable else analysis.actions
    layout = ops.group_by("rank").agg(pl.col("stage").unique().sort()).sort("rank")
    return RunShape(
        source="op-table" if analysis.is_optable else "kineto",
        schedule=facts.schedule,
        pp=facts.pp,
        world_size=facts.world_size,
        microbatches=facts.microbatches,
        layout=tuple((int(rank), tuple(int(s) for s in stages)) for rank, stages in layout.iter_rows()),
    )


@dataclass(frozen=True, eq=False)
class RunDiff:
    """BASE and NEW compared; each part computed once, on first use (see the module docstring)."""

    base: RunAnalysis
    new: RunAnalysis
    config: DiffConfig = field(default_factory=DiffConfig)

    @property
    def source(self) -> str:
        """``BASE vs NEW``, as errors and outputs name the pair."""
        return f"{self.base.source} vs {self.new.source}"

    @cached_property
    def comparability(self) -> Comparability:
        """How the runs are compared; TracekitError (one line) when they differ and that is not allowed."""
        return comparability(
            shape_of(self.base), shape_of(self.new), self.config.allow_different, self.source
        )

    @property
    def _new_replay(self) -> tuple[ReplayCase, np.ndarray | None]:
        # NEW's own replay (``RunAnalysis.replay``), built once: the ideal ops read it too.
        replay = self.new.replay
        return replay.case, replay.node_of_action

    @property
    def new_case(self) -> ReplayCase:
        """NEW as a replay case, one op per node (the counterfactuals' base)."""
        return self._new_replay[0]

    @cached_property
    def _measured(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        self.comparability  # noqa: B018 (every part starts here: refuse runs that differ before computing)
        base = self.base.case.measured if self.base.is_optable else step_spans(self.base.actions)
        return base, self.new_case.measured

    @cached_property
    def steps(self) -> pl.DataFrame:
        """Both runs' step times (``tracekit.changes.steps.STEPS_SCHEMA``)."""
        return steps_frame(*self._measured)

    @cached_property
    def step_change(self) -> StepChange:
        """The change of the median step, its noise band and whether it stands beyond it."""
        base, new = self._measured
        return step_change(base["measured_ms"].to_numpy(), new["measured_ms"].to_numpy(), self.config.noise)

    @cached_property
    def host(self) -> HostChange | None:
        """Each run's host wait per step (``tracekit.changes.host``); None where either run lacks the probes."""
        change = self.step_change
        waits = []
        for analysis, steps in ((self.base, change.base), (self.new, change.new)):
            probes = None if analysis.is_optable else analysis.probes
            waits.append(None if probes is None else host_wait_ms(probes.window, steps.median_ms))
        return host_change(*waits)

    @property
    def _base_ops(self) -> pl.DataFrame:
        return self.base.ideal_ops

    @cached_property
    def explanation(self) -> Explanation:
        """The change decomposed into ranks, groups and links (``tracekit.changes.explain``)."""
        key = self.comparability.key
        base, new = self._measured
        mean_change = float(new["measured_ms"].mean() - base["measured_ms"].mean())  # type: ignore[operator]
        case, node = self._new_replay
        links: Transfers | None = None
        if node is not None and not self.base.is_optable:
            links = transfers(self.new.actions, node, self.base.actions)
        return explain(
            case, self._base_ops, key, mean_change, links, self.new.ideal_ops, self.step_change.change_ms
        )

    @cached_property
    def work(self) -> pl.DataFrame:
        """New and vanished work (``tracekit.changes.work.WORK_SCHEMA``)."""
        by_rank = self.comparability.key == RANK_KEY
        overlaps = [None if a.gpu is None else a.gpu.overlap for a in (self.base, self.new)]
        return new_and_vanished(self._base_ops, self.new.ideal_ops, by_rank, *overlaps)

    @cached_property
    def ranks(self) -> pl.DataFrame | None:
        """Per-rank bubble, busy and overlap in both runs (``RANK_CHANGE_SCHEMA``); None for op-tables."""
        self.comparability  # noqa: B018 (refuse runs that differ)
        if self.base.is_optable or self.new.is_optable:
            return None
        overlaps = [None if a.gpu is None else a.gpu.overlap for a in (self.base, self.new)]
        return rank_changes(self.base.utilization.per_rank, self.new.utilization.per_rank, *overlaps)

    @property
    def warnings(self) -> tuple[str, ...]:
        """What loading found in either run, and what differs when the runs are compared anyway."""
        differs = self.comparability.differences
        compared = (
            (
                (
                    f"runs differ ({'; '.join(differs)}): compared per stage and kind, links only between rank "
                    "pairs both runs have"
                ),
            )
            if differs
            else ()
        )
        return self.base.run_warnings + self.new.run_warnings + compared


def diff(
    base: RunAnalysis | Path | str,
    new: RunAnalysis | Path | str,
    config: DiffConfig | None = None,
) -> RunDiff:
    """Compare ``new`` against ``base`` (each a ``RunAnalysis``, a run directory or an op-table)."""
    base_analysis = base if isinstance(base, RunAnalysis) else analyse(base)
    new_analysis = new if isinstance(new, RunAnalysis) else analyse(new)
    return RunDiff(base_analysis, new_analysis, config or DiffConfig())
