"""The realized schedule: one row per compute action each rank executed, read from its labels.

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| step | Int32 | training step (``tracekit:step#n``, else ``ProfilerStep#n``, else occurrence order) | never null |
| stage | Int32 | global pipeline stage index (docs/labels.md) | never null |
| kind | String | F, B (full backward), I (backward for inputs), W (backward for weights) | never null |
| microbatch | Int32 | micro-batch index | never null |
| start_ns | Int64 | start, ns on the rank's clock (event table convention) | never null |
| end_ns | Int64 | end, ns | never null |
| overlapped | Boolean | True for the two halves of an overlapped F&B pair | never null |
| source | String | which label format named the action (``LabelFormat.name``) | never null |

Rows are ordered by rank, then start. When one action carries several labels (torch's ``PP:`` span
around the collector's ``tracekit:`` span), the most trusted format wins. An overlapped pair whose
halves are not labelled separately (torch's ScheduleDualPipeV) becomes two rows spanning the pair.

Not for: timing metrics (``tracekit.analysis.utilization``) or GPU kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.errors import TracekitError
from tracekit.schedule.action import pair_body_pattern
from tracekit.trace.labels import Role, match_labels
from tracekit.trace.run import Run

REALIZED_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "microbatch": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "overlapped": pl.Boolean(),
    "source": pl.String(),
}

_ACTION_KEY = ["rank", "stage", "kind", "microbatch"]
_KIND_ORDER = {"F": 0, "B": 1, "I": 2, "W": 3}
"""Tie-break for actions that start together (an unlabelled pair's halves): forward first."""


@dataclass(frozen=True)
class RealizedSchedule:
    """The realized actions of a run, with what could not be placed."""

    actions: pl.DataFrame
    """Frame in ``REALIZED_SCHEMA``."""
    warnings: tuple[str, ...]


def _stage_of_single_stage_ranks(run: Run) -> dict[int, int]:
    """Rank -> its only stage, from the manifest's rank-to-stages map (rank itself when there is none)."""
    mapping = {rank: rank for rank in run.ranks}
    for entry in run.manifest.ranks if run.manifest is not None else ():
        if entry.stages is not None and len(entry.stages) == 1:
            mapping[entry.rank] = entry.stages[0]
    return mapping


def _pair_halves(pairs: pl.DataFrame) -> pl.DataFrame:
    """Each overlapped-pair span as two half rows (forward, then backward) spanning the pair."""
    if pairs.is_empty():
        return pairs
    parts = (
        pairs["pair"]
        .str.extract_groups(f"^{pair_body_pattern('f', 'b')}$")
        .struct.unnest()
    )
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
        .drop("span_step", "span_start", "span_end")
    )
    by_occurrence = (
        actions.filter(~pl.col("rank").is_in(labelled_ranks.implode()))
        .sort("rank", "start_ns")
        # Count per label format, so a torch span and the collector span inside it share a step.
        .with_columns(pl.int_range(pl.len()).over([*_ACTION_KEY, "source"]).cast(pl.Int32()).alias("step"))
    )
    return pl.concat([with_spans, by_occurrence])


def realized_schedule(run: Run) -> RealizedSchedule:
    """Reconstruct every rank's executed actions from the run's labels; TracekitError when there are none."""
    labels = match_labels(run.events.filter(pl.col("cat") == "user_annotation")).with_columns(
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns")
    )
    warnings: list[str] = []
    actions = labels.filter(pl.col("role") == Role.ACTION.value)
    pairs = labels.filter(pl.col("role") == Role.PAIR.value)
    if actions.is_empty() and pairs.is_empty():
        raise TracekitError(
            "no schedule labels (tracekit:…, PP:…, Forward i/Backward i) in any rank's trace: capture "
            "with `tracekit record`, or label actions with collectors.mark",
            run.root,
        )
    single_stage = _stage_of_single_stage_ranks(run)
    actions = actions.with_columns(
        pl.col("stage").fill_null(pl.col("rank").replace_strict(single_stage, return_dtype=pl.Int32()))
    )

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
    outside = actions.filter(pl.col("step").is_null())
    if not outside.is_empty():
        warnings.append(
            f"{run.root}: {outside.height} labelled actions lie outside every step span and were left out "
            f"(ranks {sorted(outside['rank'].unique().to_list())})"
        )
    actions = (
        actions.filter(pl.col("step").is_not_null())
        .sort("priority", "dur_ns", descending=[True, False])
        .unique([*_ACTION_KEY, "step"], keep="first")
        .select(list(REALIZED_SCHEMA))
        .cast(REALIZED_SCHEMA)  # type: ignore[arg-type]
        .sort("rank", "start_ns", pl.col("kind").replace_strict(_KIND_ORDER, return_dtype=pl.Int8()))
    )
    unlabelled = sorted(set(run.ranks) - set(actions["rank"].unique().to_list()))
    if unlabelled:
        warnings.append(f"{run.root}: ranks {unlabelled} have no schedule labels: their actions are unknown")
    return RealizedSchedule(actions=actions, warnings=tuple(warnings))


def realized_actions(run: Run) -> pl.DataFrame:
    """The realized schedule frame alone (``REALIZED_SCHEMA``)."""
    return realized_schedule(run).actions
