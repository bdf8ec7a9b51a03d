"""The realized schedule: one row per compute action each rank executed, read from its labels.

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| replica | Int32 | data-parallel replica: the index of the rank's pipeline group (``tracekit.analysis.pipelines``); 0 for a single pipeline | never null |
| step | Int32 | training step (``tracekit:step#n``, else ``ProfilerStep#n``, else occurrence order) | never null |
| stage | Int32 | global pipeline stage index (docs/labels.md) | never null |
| kind | String | F, B (full backward), I (backward for inputs), W (backward for weights) | never null |
| microbatch | Int32 | micro-batch index | never null |
| start_ns | Int64 | start, ns on the rank's clock (event table convention) | never null |
| end_ns | Int64 | end, ns | never null |
| overlapped | Boolean | True for the two halves of an overlapped F&B pair | never null |
| source | String | which label format named the action (``LabelFormat.name``) | never null |

Stages are global pipeline stages, the same in every replica: the replica column tells the copies
of a stage apart.

Rows are ordered by rank, then start. When one action carries several labels (torch's ``PP:`` span
around the collector's ``tracekit:`` span), the most trusted format wins. An overlapped pair whose
halves are not labelled separately (torch's ScheduleDualPipeV) becomes two rows spanning the pair.

This module is the one producer of a run's realized actions (``realize``), and it chooses their
clock once per run:

- ``gpu`` when the run has GPU events and some action launched kernels inside its label: every
  action's start and end are then the first start and last end of the GPU work launched inside it
  (``tracekit.gpu.schedule.project_actions``); an action that launched nothing keeps its CPU span,
  and a warning counts them. On a GPU the CPU runs ahead of the kernels, so launch times are not
  the work.
- ``cpu`` otherwise: the label spans as recorded.

Then each host's clock is put on the first host's (``tracekit.analysis.clock``): ranks on different
hosts do not share a clock. Every figure downstream (utilization, stragglers, what-if, the ideal,
the dashboard, planner calibration) reads this one frame.

Not for: timing metrics (``tracekit.analysis.utilization``) or GPU kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import polars as pl

from collectors.manifest import Manifest
from tracekit.analysis.pipelines import ONE_PIPELINE, PipelineGroups, with_replicas
from tracekit.errors import TracekitError
from tracekit.schedule.action import pair_body_pattern
from tracekit.trace.labels import Role, match_labels
from tracekit.trace.run import Run
from tracekit.analysis.clock import ClockAlignment, apply_offsets, estimate_offsets

REALIZED_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "replica": pl.Int32(),
    "step": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "microbatch": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "overlapped": pl.Boolean(),
    "source": pl.String(),
}

RANK_ACTIONS_SCHEMA: dict[str, pl.DataType] = {
    name: dtype for name, dtype in REALIZED_SCHEMA.items() if name != "replica"
}
"""One rank's labelled actions (``rank_labels``): ``REALIZED_SCHEMA`` but the replica, which the
run's pipeline groups give when the ranks are put together (``combine_labels``)."""

_ACTION_KEY = ["rank", "stage", "kind", "microbatch"]
_KIND_ORDER = {"F": 0, "B": 1, "I": 2, "W": 3}
"""Tie-break for actions that start together (an unlabelled pair's halves): forward first."""


@dataclass(frozen=True)
class RealizedSchedule:
    """The realized actions of a run, with what could not be placed."""

    actions: pl.DataFrame
    """Frame in ``REALIZED_SCHEMA``."""
    warnings: tuple[str, ...]


def manifest_stages(manifest: Manifest | None) -> dict[int, int]:
    """Rank -> its only stage, for the ranks the manifest's rank-to-stages map gives one stage."""
    return {
        entry.rank: entry.stages[0]
        for entry in (manifest.ranks if manifest is not None else ())
        if entry.stages is not None and len(entry.stages) == 1
    }


def default_stage(manifest: Manifest | None, groups: PipelineGroups, rank: int) -> int:
    """The stage of ``rank``'s labels that name none: the manifest's only stage, else its pipeline rank."""
    return manifest_stages(manifest).get(rank, groups.pipeline_rank(rank))


def _pair_halves(pairs: pl.DataFrame) -> pl.DataFrame:
    """Each overlapped-pair span as two half rows (forward, then backward) spanning the pair."""
    if pairs.is_empty():
        return pairs
    parts = pairs["pair"].str.extract_groups(f"^{pair_body_pattern('f', 'b')}$").struct.unnest()
    base = pairs.drop("stage", "kind", "microbatch")
    halves = [
        base.with_columns(
            parts[f"{side}stage"].cast(pl.Int32()).alias("stage"),
            parts[f"{side}kind"].alias("kind"),
            parts[f"{side}mb"].cast(pl.Int32()).alias("microbatch"),
        )
        for side in ("f", "b")
    ]
    return pl.concat(halves).select(pairs.columns)


def _assign_steps(actions: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Give each action the step span that contains its start; occurrence order on ranks without spans."""
    labelled_ranks = steps["rank"].unique()
    spans = (
        steps.sort("priority", descending=True)
        .unique(["rank", "start_ns"], keep="first")
        .select("rank", pl.col("step").alias("span_step"), pl.col("start_ns").alias("span_start"), "end_ns")
        .rename({"end_ns": "span_end"})
        .sort("rank", "span_start")
    )
    with_spans = (
        actions.filter(pl.col("rank").is_in(labelled_ranks.implode()))
        .sort("rank", "start_ns")
        .join_asof(
            spans,
            left_on="start_ns",
            right_on="span_start",
            by="rank",
            strategy="backward",
            check_sortedness=False,  # both sides are sorted by (rank, time) above
        )
        .with_columns(
            pl.when(pl.col("start_ns") < pl.col("span_end")).then(pl.col("span_step")).alias("step")
        )
        .with_columns(
            # An action cannot outlast the step it started in: its ``dur`` is bad (rank_labels leaves it out).
            (pl.col("step").is_not_null() & (pl.col("end_ns") > pl.col("span_end"))).alias("overran"),
            (pl.col("end_ns") - pl.col("span_end")).alias("overrun_ns"),
        )
        .drop("span_step", "span_start", "span_end")
    )
    by_occurrence = (
        actions.filter(~pl.col("rank").is_in(labelled_ranks.implode()))
        .sort("rank", "start_ns")
        # Count per label format, so a torch span and the collector span inside it share a step.
        .with_columns(pl.int_range(pl.len()).over([*_ACTION_KEY, "source"]).cast(pl.Int32()).alias("step"))
        .with_columns(pl.lit(False).alias("overran"), pl.lit(0, pl.Int64()).alias("overrun_ns"))
    )
    return pl.concat([with_spans, by_occurrence.select(with_spans.columns)])


@dataclass(frozen=True)
class RankLabels:
    """One rank's labelled actions (``rank_labels``), before ``combine_labels`` puts the run's together."""

    rank: int
    actions: pl.DataFrame
    """This rank's rows in ``RANK_ACTIONS_SCHEMA``, CPU label spans, ordered as the run's frame orders them."""
    outside: int
    """Labelled actions of this rank outside every step span (left out)."""
    labelled: bool
    """True when the rank's trace labels actions or overlapped pairs at all."""
    stage: int
    """The stage given to its labels that name none."""
    stage_given: bool
    """True when some label named no stage, so that ``stage`` shaped ``actions``."""
    overran: int = 0
    """Labelled actions that end after the step they started in (a bad ``dur``): left out."""
    longest_overrun_ns: int = 0
    """How far the worst of them ran past its step's end."""


def rank_labels(annotations: pl.DataFrame, rank: int, stage: int) -> RankLabels:
    """One rank's executed actions from its ``user_annotation`` event rows; ``stage``: its stage when labels omit it.

    Everything here is within the rank, so each rank's labels are read where its trace is (in a
    worker process, or a worker of a cluster) and only this small result travels.
    """
    labels = match_labels(annotations.filter(pl.col("cat") == "user_annotation")).with_columns(
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns")
    )
    actions = labels.filter(pl.col("role") == Role.ACTION.value)
    pairs = labels.filter(pl.col("role") == Role.PAIR.value)
    labelled = not (actions.is_empty() and pairs.is_empty())
    if not labelled:  # most GPU-only ranks: nothing to place, so none of the joins below
        empty = pl.DataFrame(schema=RANK_ACTIONS_SCHEMA)
        return RankLabels(rank=rank, actions=empty, outside=0, labelled=False, stage=stage, stage_given=False)
    stage_given = actions["stage"].null_count() > 0
    actions = actions.with_columns(pl.col("stage").fill_null(pl.lit(stage, pl.Int32())))

    # A half labelled inside its pair span keeps its own times; an unlabelled half spans the pair.
    halves = _pair_halves(pairs)
    inside = halves.join(actions, on=_ACTION_KEY, suffix="_action").filter(
        (pl.col("start_ns_action") >= pl.col("start_ns")) & (pl.col("end_ns_action") <= pl.col("end_ns"))
    )
    marked = inside.select(*_ACTION_KEY, pl.col("start_ns_action").alias("start_ns")).with_columns(
        pl.lit(True).alias("overlapped")
    )
    actions = actions.join(marked, on=[*_ACTION_KEY, "start_ns"], how="left").with_columns(
        pl.col("overlapped").fill_null(False)
    )
    unlabelled_halves = halves.join(
        inside.select(*_ACTION_KEY, "start_ns"), on=[*_ACTION_KEY, "start_ns"], how="anti"
    ).with_columns(pl.lit(True).alias("overlapped"))
    actions = pl.concat([actions, unlabelled_halves.select(actions.columns)])

    actions = _assign_steps(actions, labels.filter(pl.col("role") == Role.STEP.value))
    outside = actions.filter(pl.col("step").is_null()).height
    overran = actions.filter(pl.col("overran"))
    actions = (
        actions.filter(pl.col("step").is_not_null() & ~pl.col("overran"))
        .sort("priority", "dur_ns", descending=[True, False])
        .unique([*_ACTION_KEY, "step"], keep="first")
        .select(list(RANK_ACTIONS_SCHEMA))
        .cast(RANK_ACTIONS_SCHEMA)  # type: ignore[arg-type]
    )
    return RankLabels(
        rank=rank,
        actions=_sorted(actions),
        outside=outside,
        labelled=labelled,
        stage=stage,
        stage_given=stage_given,
        overran=overran.height,
        longest_overrun_ns=int(overran["overrun_ns"].max() or 0) if overran.height else 0,
    )


def no_labels_error(root: object) -> TracekitError:
    """The one "no schedule labels" error users know, for the run at ``root``."""
    return TracekitError(
        "no schedule labels (tracekit:…, PP:…, Forward i/Backward i) in any rank's trace: capture "
        "with `tracekit record`, or label actions with collectors.mark",
        root,  # type: ignore[arg-type]
    )


def combine_labels(
    ranks: list[RankLabels], root: object, groups: PipelineGroups = ONE_PIPELINE
) -> RealizedSchedule:
    """The run's realized schedule from every present rank's ``rank_labels``; TracekitError without labels.

    ``groups`` gives each rank its replica.
    """
    if not any(rank.labelled for rank in ranks):
        raise no_labels_error(root)
    warnings: list[str] = []
    outside = [rank for rank in ranks if rank.outside]
    if outside:
        warnings.append(
            f"{root}: {sum(rank.outside for rank in outside)} labelled actions lie outside every step span and "
            f"were left out (ranks {sorted(rank.rank for rank in outside)})"
        )
    for rank in ranks:
        if rank.overran:
            warnings.append(
                f"{root}: rank {rank.rank}: {rank.overran} labelled actions end after the step they "
                f"started in (the worst by {rank.longest_overrun_ns / 1e6:,.1f} ms: a bad duration in "
                "the trace); they were left out"
            )
    ordered = sorted(ranks, key=lambda rank: rank.rank)
    actions = with_replicas(pl.concat([rank.actions for rank in ordered]), groups).select(
        list(REALIZED_SCHEMA)
    )
    unlabelled = sorted(rank.rank for rank in ranks if rank.actions.is_empty())
    if unlabelled:
        warnings.append(f"{root}: ranks {unlabelled} have no schedule labels: their actions are unknown")
    return RealizedSchedule(actions=actions, warnings=tuple(warnings))


def realized_schedule(run: Run, groups: PipelineGroups = ONE_PIPELINE) -> RealizedSchedule:
    """Reconstruct every rank's executed actions from the run's labels; TracekitError when there are none.

    ``groups`` gives each rank its replica (and, for labels without a stage, its stage).
    """
    ranks = [
        rank_labels(
            run.rank_events(rank).filter(pl.col("cat") == "user_annotation").collect(),
            rank,
            default_stage(run.manifest, groups, rank),
        )
        for rank in run.ranks
    ]
    return combine_labels(ranks, run.root, groups)


class Clock(str, Enum):
    """Which clock a run's realized actions are timed on."""

    GPU = "gpu"
    """The GPU work launched inside each action's label."""
    CPU = "cpu"
    """The action labels' own CPU spans."""


@dataclass(frozen=True)
class RealizedActions:
    """A run's realized actions on one clock: the frame every analysis of the run reads."""

    actions: pl.DataFrame
    """Frame in ``REALIZED_SCHEMA``, times on ``clock``, hosts aligned by ``alignment``."""
    clock: Clock
    alignment: ClockAlignment | None
    """The per-host offsets applied (all 0 on one host); None for actions given without traces."""
    warnings: tuple[str, ...]


def rank_hosts(run: Run) -> dict[int, str] | None:
    """Rank -> host from the manifest, else from the traces; None unless every rank's host is known."""
    from_manifest = {
        entry.rank: entry.host
        for entry in (run.manifest.ranks if run.manifest is not None else ())
        if entry.host is not None
    }
    if set(run.ranks) <= set(from_manifest):
        return from_manifest
    from_traces = {trace.rank: trace.host_name for trace in run.traces if trace.host_name}
    return from_traces if set(run.ranks) <= set(from_traces) else None  # type: ignore[return-value]


def on_gpu_clock(projection: pl.DataFrame, root: object) -> tuple[pl.DataFrame, Clock, tuple[str, ...]]:
    """The actions of a projection (``tracekit.gpu.schedule.ACTION_PROJECTION_SCHEMA``) on their clock.

    GPU when any action launched GPU work inside its label, else CPU (see the module docstring).
    """
    launched = projection.filter(pl.col("kernels") > 0)
    if launched.is_empty():
        return projection.select(list(REALIZED_SCHEMA)), Clock.CPU, ()
    kept = projection.height - launched.height
    frame = projection.with_columns(
        pl.coalesce("gpu_start_ns", "start_ns").alias("start_ns"),
        pl.coalesce("gpu_end_ns", "end_ns").alias("end_ns"),
    ).select(list(REALIZED_SCHEMA))
    message = (
        f"{root}: {kept} of {projection.height} labelled actions launched no GPU work: they keep their "
        "CPU (launch) times on the GPU clock"
    )
    warnings = (message,) if kept else ()
    return frame, Clock.GPU, warnings


def _sorted(actions: pl.DataFrame) -> pl.DataFrame:
    # Every key column breaks ties, so the order is the same on every run.
    return actions.sort(
        "rank",
        "start_ns",
        pl.col("kind").replace_strict(_KIND_ORDER, return_dtype=pl.Int8()),
        "stage",
        "microbatch",
        "end_ns",
        "step",
    )


def realize(run: Run, labelled: RealizedSchedule, projection: pl.DataFrame | None) -> RealizedActions:
    """The run's realized actions on one clock, from its labelled actions and, on GPU runs, their projection.

    ``projection`` is ``tracekit.gpu.analysis.GpuAnalysis.action_projection`` of ``labelled.actions``
    (None when the run has no GPU events).
    """
    warnings = list(labelled.warnings)
    if projection is None:
        actions, clock = labelled.actions, Clock.CPU
    else:
        actions, clock, gpu_warnings = on_gpu_clock(projection, run.root)
        warnings += gpu_warnings
    alignment = estimate_offsets(actions, rank_hosts(run), str(run.root))
    if alignment.violations:
        warnings.append(
            f"{run.root}: {alignment.violations} of {alignment.dependencies} cross-rank dependencies still run "
            f"backwards after clock alignment (worst {alignment.worst_violation_ns / 1e6:.3f} ms): one offset per "
            "host cannot satisfy them"
        )
    if alignment.unresolved_hosts:
        warnings.append(
            f"{run.root}: hosts {list(alignment.unresolved_hosts)} exchange with the others only one way: their "
            "clocks were left unaligned"
        )
    aligned = _sorted(apply_offsets(actions, alignment.rank_offset_ns))
    return RealizedActions(actions=aligned, clock=clock, alignment=alignment, warnings=tuple(warnings))
