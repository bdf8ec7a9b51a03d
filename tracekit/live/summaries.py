"""Ranks' step summaries (``collectors.live_wire``) as typed values and as a realized-actions frame.

A summary is validated where it enters (a datagram from the network); one that does not fit is
refused with the reason, counted by the aggregator and never half-used. ``realized_frame`` lays
the summaries of an interval out in ``tracekit.analysis.realized.REALIZED_SCHEMA``, so the live
scores come from the same functions as the offline analysis of a trace.

``STEP_SCHEMA``, one row per (rank, step) summary:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| step | Int32 | training step (the rank's count of step() calls, from 0) | never null |
| step_ms | Float64 | the rank's own step duration, first hook to last | never null |
| comm_ms | Float64 | time waiting on pipeline communication in the step | never null |
| dropped | Int64 | summaries the rank had dropped when it sent this one | never null |

Not for: receiving datagrams (``tracekit.live.aggregator``) or scoring (``tracekit.live.assess``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from collectors.merge import merge_pipeline_groups
from tracekit.analysis.realized import REALIZED_SCHEMA

LIVE_SOURCE = "live"
"""``source`` of realized actions timed in live mode (not read from a label)."""

KINDS = frozenset("FBIW")

STEP_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "step_ms": pl.Float64(),
    "comm_ms": pl.Float64(),
    "dropped": pl.Int64(),
}


@dataclass(frozen=True)
class StepSummary:
    """One rank's summary of one step."""

    rank: int
    world_size: int
    host: str
    pid: int
    step: int
    start_ns: int
    """Step start on the rank's host clock (perf_counter_ns)."""
    duration_ns: int
    comm_ns: int
    clock: str
    """``cpu`` (perf_counter) or ``cuda`` (events)."""
    profiled: bool
    """torch.profiler ran during the step (a capture on anomaly): its timing is not typical."""
    dropped: int
    actions: tuple[tuple[int, str, int, int, int, bool], ...]
    """(stage, kind, micro-batch, start offset ns, end offset ns, overlapped)."""
    stage_work: tuple[tuple[int, int, int, int], ...] = ()
    """(stage, params, embedding_params, layers) of the rank's stages (``collectors.work``)."""
    pipeline_group: tuple[int, ...] | None = None
    """Global ranks of the rank's pipeline process group, by group rank (``collectors.groups``); None when unknown."""
    schedule_class: str | None = None
    """The schedule's class (run.json's ``schedule.class``); None when unknown."""


def _int(value: Any, what: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{what} is {value!r}, not an integer >= {low}")
    return value


def parse_summary(message: dict[str, Any]) -> StepSummary:
    """A ``"step"`` message as a StepSummary; ValueError naming the first fault."""
    if message.get("v") != 1:
        raise ValueError(f"unknown summary version {message.get('v')!r}")
    raw_actions = message.get("a")
    if not isinstance(raw_actions, list):
        raise ValueError("no action list")
    actions = []
    for item in raw_actions:
        if not isinstance(item, list) or len(item) != 6 or item[1] not in KINDS:
            raise ValueError(f"bad action {item!r}")
        stage, kind, microbatch, start, end, overlapped = item
        start, end = _int(start, "action start", -(2**62)), _int(end, "action end", -(2**62))
        if end < start:
            raise ValueError(f"action {stage}{kind}{microbatch} ends before it starts")
        actions.append(
            (_int(stage, "stage"), kind, _int(microbatch, "micro-batch"), start, end, bool(overlapped))
        )
    stage_work = []
    for item in message.get("sw") or []:
        if not isinstance(item, list) or len(item) != 4:
            raise ValueError(f"bad stage work {item!r}")
        stage_work.append(tuple(_int(value, "stage work") for value in item))
    world = _int(message.get("w"), "world size", 1)
    rank = _int(message.get("r"), "rank")
    if rank >= world:
        raise ValueError(f"rank {rank} outside world size {world}")
    group = message.get("pg")
    if group is not None and (not isinstance(group, list) or not group):
        raise ValueError(f"bad pipeline group {group!r}")
    pipeline_group = None if group is None else tuple(_int(member, "pipeline group rank") for member in group)
    schedule_class = message.get("sc")
    if schedule_class is not None and not isinstance(schedule_class, str):
        raise ValueError(f"bad schedule class {schedule_class!r}")
    return StepSummary(
        rank=rank,
        world_size=world,
        host=str(message.get("h")),
        pid=_int(message.get("p"), "pid"),
        step=_int(message.get("s"), "step"),
        start_ns=_int(message.get("t0"), "step start", -(2**62)),
        duration_ns=_int(message.get("d"), "step duration"),
        comm_ns=_int(message.get("c"), "communication time"),
        clock=str(message.get("clk")),
        profiled=bool(message.get("cap")),
        dropped=_int(message.get("x"), "drop count"),
        actions=tuple(actions),
        stage_work=tuple(stage_work),  # type: ignore[arg-type]
        pipeline_group=pipeline_group,
        schedule_class=schedule_class,
    )


def realized_frame(summaries: Iterable[StepSummary], problems: list[str] | None = None) -> pl.DataFrame:
    """The summaries' actions in ``REALIZED_SCHEMA``, times on each rank's host clock, ordered like a trace's.

    Each rank's replica is the index of its pipeline group, merged from the summaries' groups as
    run.json's are (``collectors.merge.merge_pipeline_groups``); 0 everywhere when they name none
    or disagree (then said in ``problems``, when given).
    """
    summaries = list(summaries)
    replica = replicas_of(summaries, problems if problems is not None else [])
    rows = [
        (
            s.rank,
            replica.get(s.rank, 0),
            s.step,
            stage,
            kind,
            mb,
            s.start_ns + start,
            s.start_ns + end,
            overlapped,
            LIVE_SOURCE,
        )
        for s in summaries
        for stage, kind, mb, start, end, overlapped in s.actions
    ]
    return pl.DataFrame(rows, schema=REALIZED_SCHEMA, orient="row").sort("rank", "start_ns")


def replicas_of(summaries: Sequence[StepSummary], problems: list[str]) -> dict[int, int]:
    """Rank -> its data-parallel replica, from the pipeline groups the summaries name ({} when none or
    when they disagree: the reason is appended to ``problems``)."""
    named = {s.rank: s.pipeline_group for s in summaries if s.pipeline_group is not None}
    first_stage: dict[int, int] = {}
    for s in summaries:
        for stage, *_ in s.actions:
            first_stage[s.rank] = min(stage, first_stage.get(s.rank, stage))
    groups = merge_pipeline_groups(named, first_stage, None, problems) or ()  # type: ignore[arg-type]
    return {rank: index for index, group in enumerate(groups) for rank in group}


def stage_work_entries(summaries: Iterable[StepSummary]) -> list[dict[str, int]]:
    """The stage work the summaries carry, one entry per stage (``tracekit.analysis.work`` fields)."""
    by_stage: dict[int, dict[str, int]] = {}
    for summary in summaries:
        for stage, params, embedding_params, layers in summary.stage_work:
            by_stage.setdefault(
                stage,
                {"stage": stage, "params": params, "embedding_params": embedding_params, "layers": layers},
            )
    return [by_stage[stage] for stage in sorted(by_stage)]


def step_frame(summaries: Sequence[StepSummary]) -> pl.DataFrame:
    """One row per summary in ``STEP_SCHEMA``."""
    rows = [(s.rank, s.step, s.duration_ns / 1e6, s.comm_ns / 1e6, s.dropped) for s in summaries]
    return pl.DataFrame(rows, schema=STEP_SCHEMA, orient="row")
