"""A run's own realized order as a schedule, and its measured per-stage costs.

Input is the realized-actions frame (``tracekit.analysis.realized.realized_actions``): columns
rank, stage, kind (F/B/I/W), microbatch, step, start_ns, end_ns, overlapped (halves of an F&B
pair), one row per action. ``schedule_from_realized`` turns one training step of it into a
``Schedule`` the engine can replay ("this run, with ideal durations"); ``realized_costs`` gives
the median duration per kind and stage, in milliseconds, to drive the engine with what the run
measured. Neither computes bubbles: that is ``metrics``' job.
"""

from __future__ import annotations

import math

import polars as pl

from collectors.manifest import MicrobatchPath
from tracekit.schedule.action import Action, Kind, OverlappedPair, Step
from tracekit.schedule.costs import Costs
from tracekit.schedule.model import Schedule, ScheduleError, missing_actions

REALIZED_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "microbatch": pl.Int32(),
    "step": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "overlapped": pl.Boolean(),
}
"""The columns this module reads; other columns are ignored."""

_NS_PER_MS = 1e6


def _checked(frame: pl.DataFrame) -> pl.DataFrame:
    for name, dtype in REALIZED_SCHEMA.items():
        if name not in frame.columns:
            raise ScheduleError(f"realized actions lack column {name!r}")
        if frame.schema[name] != dtype:
            raise ScheduleError(f"realized actions column {name!r} is {frame.schema[name]}, expected {dtype}")
    if frame.is_empty():
        raise ScheduleError("realized actions are empty")
    return frame.select(list(REALIZED_SCHEMA))


def _one_step(frame: pl.DataFrame, step: int | None) -> pl.DataFrame:
    steps = sorted(frame["step"].unique().to_list())
    if step is None:
        if len(steps) != 1:
            raise ScheduleError(f"realized actions hold steps {steps}; choose one")
        step = steps[0]
    if step not in steps:
        raise ScheduleError(f"step {step} is not in the realized actions (steps {steps})")
    return frame.filter(pl.col("step") == step)


def _rank_steps(rows: pl.DataFrame) -> tuple[Step, ...]:
    """Rows of one rank, by start: overlapped halves next to each other become one pair."""
    steps: list[Step] = []
    pending: Action | None = None
    for stage, kind, microbatch, overlapped in rows.select(
        "stage", "kind", "microbatch", "overlapped"
    ).iter_rows():
        action = Action(stage, Kind(kind), microbatch)
        if not overlapped:
            if pending is not None:
                raise ScheduleError(f"overlapped half {pending} has no partner next to it")
            steps.append(action)
        elif pending is None:
            pending = action
        else:
            halves = sorted((pending, action), key=lambda half: half.kind is not Kind.FORWARD)
            if halves[0].kind is not Kind.FORWARD or halves[1].kind is Kind.FORWARD:
                raise ScheduleError(
                    f"overlapped halves {pending} and {action} are not one F and one backward"
                )
            steps.append(OverlappedPair(halves[0], halves[1]))
            pending = None
    if pending is not None:
        raise ScheduleError(f"overlapped half {pending} has no partner next to it")
    return tuple(steps)


def _paths(rows: pl.DataFrame) -> tuple[MicrobatchPath, ...]:
    """Each micro-batch's path is the stages its forwards ran on; runs of equal paths become one."""
    spans = rows.group_by("microbatch").agg(
        pl.col("stage").min().alias("first"), pl.col("stage").max().alias("last")
    )
    paths: list[MicrobatchPath] = []
    for mb, first, last in spans.sort("microbatch").iter_rows():
        if (
            paths
            and (paths[-1].first_stage, paths[-1].last_stage) == (first, last)
            and paths[-1].stop_microbatch == mb
        ):
            paths[-1] = MicrobatchPath(paths[-1].first_microbatch, mb + 1, first, last)
        else:
            paths.append(MicrobatchPath(mb, mb + 1, first, last))
    return tuple(paths)


def schedule_from_realized(frame: pl.DataFrame, step: int | None = None, name: str = "realized") -> Schedule:
    """The per-rank order one training step of a run really ran, as a replayable schedule."""
    rows = _one_step(_checked(frame), step).sort("rank", "start_ns", "end_ns")
    ranks = sorted(rows["rank"].unique().to_list())
    if ranks != list(range(len(ranks))):
        raise ScheduleError(f"realized ranks {ranks} are not 0..{len(ranks) - 1}")
    per_rank = tuple(_rank_steps(rows.filter(pl.col("rank") == rank)) for rank in ranks)
    schedule = Schedule(
        name=name,
        num_ranks=len(ranks),
        num_stages=int(rows["stage"].max()) + 1,  # type: ignore[arg-type]
        num_microbatches=int(rows["microbatch"].max()) + 1,  # type: ignore[arg-type]
        steps=per_rank,
        paths=_paths(rows),
    )
    problems = missing_actions(schedule)
    if problems:
        raise ScheduleError(
            f"the realized step is not a whole schedule ({len(problems)} problems): "
            + "; ".join(problems[:10])
        )
    return schedule


def _medians(rows: pl.DataFrame, kind: str, num_stages: int) -> tuple[float, ...]:
    medians = dict(
        rows.filter(pl.col("kind") == kind)
        .group_by("stage")
        .agg(((pl.col("end_ns") - pl.col("start_ns")).median() / _NS_PER_MS).alias("ms"))
        .iter_rows()
    )
    return tuple(float(medians.get(stage, math.nan)) for stage in range(num_stages))


def realized_costs(frame: pl.DataFrame, comm: float = 0.0, num_stages: int | None = None) -> Costs:
    """Median milliseconds per kind and stage of a run's actions; NaN where a (kind, stage) never ran.

    Overlapped pairs are measured as one chunk (first half's start to last half's end), keyed by
    the forward half's stage, and kept out of the per-kind medians. A full backward that never ran
    alone is I + W where both were measured. ``comm`` is not in the actions and comes from the
    caller.
    """
    rows = _checked(frame)
    stages = num_stages if num_stages is not None else int(rows["stage"].max()) + 1  # type: ignore[arg-type]
    alone = rows.filter(~pl.col("overlapped"))
    forward = _medians(alone, "F", stages)
    backward_input = _medians(alone, "I", stages)
    backward_weight = _medians(alone, "W", stages)
    full = tuple(
        b if not math.isnan(b) else i + w
        for b, i, w in zip(_medians(alone, "B", stages), backward_input, backward_weight)
    )
    pairs = (
        rows.filter(pl.col("overlapped"))
        .sort("rank", "start_ns")
        .with_columns((pl.int_range(pl.len()).over("rank") // 2).alias("pair"))
        .group_by("rank", "pair")
        .agg(
            pl.col("stage").filter(pl.col("kind") == "F").first().alias("stage"),
            (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("end_ns"),
            pl.lit(0, pl.Int64).alias("start_ns"),
        )
        .with_columns(pl.lit("P").alias("kind"))
    )
    overlapped = _medians(pairs, "P", stages) if not pairs.is_empty() else None
    return Costs(forward, backward_input, backward_weight, full, overlapped, comm)
