"""Pipeline groups: which ranks form each data-parallel replica's pipeline, and each rank's place in it.

A run of P pipeline ranks x D data-parallel replicas holds D copies of one pipeline, each running
every stage's actions once per step; every data dependency between actions holds within one
copy. The analysis therefore gives each rank its *replica* (the index of its pipeline group) and
its *pipeline rank* (its place in the group). The groups come from, in this order:

1. a layout the user gives (``--pipelines`` on report, stragglers, whatif and dashboard;
   ``AnalysisConfig.pipelines``), for traces whose run.json does not name them (older captures,
   other tools' traces) or names them wrongly:

   - ``contiguous:P``: ranks ``d*P .. d*P+P-1`` form replica d, pipeline rank ``rank % P``
     (pipeline innermost: ``examples/pipeline_job.py --dp D``);
   - ``strided:P``: ranks ``d, d+D, d+2D, ...`` form replica d, pipeline rank ``rank // D``, with
     D = world size / P (pipeline outermost: Megatron-core's pipeline groups are
     ``range(d, world_size, world_size // P)``);

2. run.json's ``pipeline_groups`` (``collectors.manifest.Manifest``), from the process groups the
   collector saw at capture;
3. neither: one pipeline of every rank (replica 0 everywhere). A run whose ranks repeat a stage's
   actions is then refused where dependencies are resolved (``tracekit.whatif.pipeline``), with a
   message that names the option.

Not for: reading actions (``tracekit.analysis.realized`` adds the ``replica`` column from here) or
resolving dependencies (``tracekit.whatif.pipeline``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from collectors.manifest import MANIFEST_NAME, Manifest
from tracekit.analysis.choices import LAYOUT_HELP as LAYOUT_HELP
from tracekit.analysis.choices import LAYOUT_ORDERS as LAYOUT_ORDERS
from tracekit.analysis.choices import PipelineLayout
from tracekit.errors import TracekitError

@dataclass(frozen=True)
class PipelineGroups:
    """The run's pipeline groups, where they came from, and each rank's replica and pipeline rank."""

    groups: tuple[tuple[int, ...], ...]
    """Global ranks of each replica's pipeline in pipeline-rank order; () when unknown."""
    source: str
    """Where they came from: ``--pipelines contiguous:4``, ``run.json``, or ``none``."""
    replica_of: dict[int, int] = field(init=False, compare=False, repr=False)
    """Rank -> its replica."""
    pipeline_rank_of: dict[int, int] = field(init=False, compare=False, repr=False)
    """Rank -> its place in its pipeline."""

    def __post_init__(self) -> None:
        replica = {rank: d for d, group in enumerate(self.groups) for rank in group}
        position = {rank: p for group in self.groups for p, rank in enumerate(group)}
        object.__setattr__(self, "replica_of", replica)
        object.__setattr__(self, "pipeline_rank_of", position)

    @property
    def known(self) -> bool:
        """True when the groups were named (run.json or a layout), not assumed."""
        return bool(self.groups)

    @property
    def replicas(self) -> int:
        """Data-parallel replicas (1 when unknown)."""
        return max(1, len(self.groups))

    def replica(self, rank: int) -> int:
        """Rank ``rank``'s replica (0 when the groups are unknown)."""
        return self.replica_of.get(rank, 0)

    def pipeline_rank(self, rank: int) -> int:
        """Rank ``rank``'s place in its pipeline (the rank itself when the groups are unknown)."""
        return self.pipeline_rank_of.get(rank, rank)


ONE_PIPELINE = PipelineGroups((), "none")
"""No groups named: every rank in one pipeline."""


def resolve_groups(
    manifest: Manifest | None,
    layout: PipelineLayout | None,
    world_size: int,
    ranks: tuple[int, ...],
    root: Path | str,
) -> tuple[PipelineGroups, tuple[str, ...]]:
    """The run's pipeline groups (module docstring's order) and warnings; TracekitError naming the fault."""
    named = None if manifest is None else manifest.pipeline_groups
    warnings: tuple[str, ...] = ()
    if layout is not None:
        try:
            groups = PipelineGroups(layout.groups(world_size), f"--pipelines {layout}")
        except ValueError as error:
            raise TracekitError(f"--pipelines {layout}: {error}", root) from None
        if named is not None and named != groups.groups:
            named_text = ", ".join(str(list(group)) for group in named)
            warnings = (
                f"{root}: --pipelines {layout} overrides the pipeline groups run.json names ({named_text})",
            )
    elif named is not None:
        groups = PipelineGroups(named, MANIFEST_NAME)
    else:
        return ONE_PIPELINE, ()
    if manifest is not None:
        _check_same_stages(groups, manifest.rank_to_stages, root)
    outside = [rank for rank in ranks if rank not in groups.replica_of]
    if outside:
        where = Path(root) / MANIFEST_NAME if groups.source == MANIFEST_NAME else root
        raise TracekitError(
            f"rank {outside[0]} is in no pipeline group of {groups.source}: pass --pipelines "
            "contiguous:P or strided:P",
            where,
        )
    return groups, warnings


def _check_same_stages(
    groups: PipelineGroups, rank_to_stages: dict[int, tuple[int, ...]], root: Path | str
) -> None:
    """TracekitError when two replicas' ranks at one pipeline position hold different stages.

    Replicas are copies of one pipeline: a layout that makes ``contiguous:2`` replicas of a single
    4-stage pipeline would compare stage 0 with stage 2 as if they were the same work.
    """
    for position in range(min(len(group) for group in groups.groups)):
        held = {group[position]: rank_to_stages.get(group[position]) for group in groups.groups}
        known = {rank: stages for rank, stages in held.items() if stages is not None}
        if len(set(known.values())) > 1:
            shown = ", ".join(f"rank {rank} stages {list(stages)}" for rank, stages in known.items())
            raise TracekitError(
                f"{groups.source}: its replicas hold different stages at pipeline rank {position} "
                f"({shown}), so they are not copies of one pipeline; pass the layout the job used",
                root,
            )


def with_replicas(actions: pl.DataFrame, groups: PipelineGroups) -> pl.DataFrame:
    """``actions`` with an Int32 ``replica`` column after ``rank``: each rank's replica."""
    replica = (
        pl.col("rank").replace_strict(groups.replica_of, default=0, return_dtype=pl.Int32())
        if groups.known
        else pl.lit(0, pl.Int32())
    )
    frame = actions.with_columns(replica.alias("replica"))
    columns = [c for c in frame.columns if c != "replica"]
    at = columns.index("rank") + 1
    return frame.select(*columns[:at], "replica", *columns[at:])


def pipeline_positions(actions: pl.DataFrame) -> pl.DataFrame:
    """Rank -> (replica, position, stages): ranks running the same stages share a position.

    ``actions`` is a realized-actions frame (``tracekit.analysis.realized.REALIZED_SCHEMA``).
    Positions are ordered by their first stage. TracekitError when the replicas are uneven.
    """
    sets = (
        actions.group_by("rank")
        .agg(
            pl.col("replica").first(),
            pl.col("stage").unique().sort().cast(pl.String()).str.join(",").alias("stages"),
            pl.col("stage").min().alias("first"),
        )
        .sort("rank")
    )
    counts = sets.group_by("stages").len()
    if counts["len"].n_unique() != 1:
        raise TracekitError(
            "ranks do not form equal pipeline replicas: "
            + ", ".join(f"stages {s} on {n} ranks" for s, n in counts.sort("stages").iter_rows())
        )
    doubled = sets.group_by("replica", "stages").len().filter(pl.col("len") > 1).sort("replica", "stages")
    if not doubled.is_empty():
        replica, stages, count = doubled.row(0)
        raise TracekitError(f"{count} ranks of replica {replica} run stages {stages}: pipeline groups unknown")
    positions = (
        sets.select("stages", "first")
        .unique()
        .sort("first")
        .with_row_index("position")
        .with_columns(pl.col("position").cast(pl.Int32()))
    )
    return (
        sets.join(positions.select("stages", "position"), on="stages")
        .select("rank", "replica", "position", "stages")
        .sort("rank")
    )
