"""Where a run's analysis starts: a Kineto trace directory, an op-table, or realized actions given.

``RunAnalysis`` (``tracekit.run_analysis``) takes one ``RunSource``; each kind says what it holds,
and the analysis asks it instead of testing which fields are None:

- ``KinetoSource``: loaded traces (and the per-rank reductions ``analyse`` computed beside the
  parse): labels, GPU events, the manifest;
- ``OpTableSource``: an OSDI'25 op-table (Parquet) and its job metadata YAML: a replay case, no
  actions;
- ``ActionsSource``: a realized-actions frame (``REALIZED_SCHEMA``) on one clock, with the manifest,
  stage work and world size that go with it (simulated runs, live intervals).

Not for: reading or analysing anything (the sources only hold what was read).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import polars as pl

from collectors.manifest import Manifest
from tracekit.perrank.reduce import RunReductions
from tracekit.trace.run import Run

SourceKind = Literal["kineto", "op-table", "actions"]


class RunSource(Protocol):
    """What every source of a run answers."""

    @property
    def kind(self) -> SourceKind:
        """``kineto``, ``op-table`` or ``actions`` (``RunFacts.source``)."""
        ...

    @property
    def manifest(self) -> Manifest | None:
        """The collector's run.json, when the source has one."""
        ...

    @property
    def world_size(self) -> int | None:
        """The job's ranks (missing ones are listed as unjudged); None when unknown."""
        ...


@dataclass(frozen=True)
class KinetoSource:
    """Loaded Kineto traces of a run directory."""

    run: Run
    reductions: RunReductions | None = None
    """Every rank's reductions as ``analyse`` computed them beside the parse; None: on first use."""
    kind: SourceKind = "kineto"

    @property
    def manifest(self) -> Manifest | None:
        """The run directory's run.json."""
        return self.run.manifest

    @property
    def world_size(self) -> int | None:
        """The manifest's world size."""
        return None if self.run.manifest is None else self.run.manifest.world_size


@dataclass(frozen=True)
class OpTableSource:
    """An op-table (``.parquet``) and its job metadata YAML."""

    path: Path
    meta: Path | None = None
    """The job metadata YAML; None: the one ``meta*.yaml`` beside the table."""
    kind: SourceKind = "op-table"
    manifest: Manifest | None = None
    world_size: int | None = None


@dataclass(frozen=True)
class ActionsSource:
    """A realized-actions frame given directly, with what goes with it."""

    actions: pl.DataFrame
    given_manifest: Manifest | None = None
    stage_work: pl.DataFrame | None = None
    """Per-stage work (``tracekit.analysis.work``); None: the manifest's."""
    given_world_size: int | None = None
    """The job's ranks when there is no manifest (live intervals)."""
    given_schedule_class: str | None = None
    """The schedule's class when there is no manifest (live intervals: the ranks' summaries name it)."""
    kind: SourceKind = "actions"

    @property
    def manifest(self) -> Manifest | None:
        """The manifest given with the actions."""
        return self.given_manifest

    @property
    def world_size(self) -> int | None:
        """The manifest's world size, else the one given."""
        return self.given_world_size if self.given_manifest is None else self.given_manifest.world_size
