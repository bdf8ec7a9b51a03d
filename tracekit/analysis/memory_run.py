"""A run's memory analysis: each rank's memory events, sidecar and actions through ``analysis.memory``.

``run_memory`` reads each present rank's memory events (``tracekit.trace.memory_events``, cut where
the run is cut) and its sidecar's memory facts, takes the simulator's peaks for the run's schedule
(``tracekit.analysis.memory_schedule``, one pipeline: replica 0) and puts the ranks' frames
together into one ``Memory``. A run whose traces recorded no memory (captures made before memory
recording, or with ``TRACEKIT_PROFILE_MEMORY=0``) gives ``Memory.recorded`` False, empty frames
and a note saying why: never a table of zeros. Reading the memory events parses each trace's JSON
once more; it happens on first use of ``RunAnalysis.memory`` only.

Not for: the definitions (``tracekit.analysis.memory``) or presenting them (``tracekit.present.memory``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from collectors.manifest import Manifest, RankMemory
from tracekit.analysis.memory import (
    STAGE_BYTES_SCHEMA,
    STEP_MEMORY_SCHEMA,
    TIMELINE_SCHEMA,
    RankInputs,
    analyse_rank,
)
from tracekit.analysis.memory_findings import RANK_MEMORY_SCHEMA, rank_summary
from tracekit.trace.memory_events import read_memory_events
from tracekit.trace.provenance import read_sidecars
from tracekit.trace.run import Run

NOT_RECORDED = (
    "no memory columns: the traces hold no memory events (captured without profile_memory: "
    "before memory recording existed, or with TRACEKIT_PROFILE_MEMORY=0)"
)
"""The note a run without memory events gets instead of its memory figures."""


@dataclass(frozen=True)
class Memory:
    """The memory figures of a run (``tracekit.analysis.memory``'s schemas), or why there are none."""

    recorded: bool
    """True when every present rank's trace recorded memory events."""
    ranks: pl.DataFrame
    """RANK_MEMORY_SCHEMA, one row per rank with memory events."""
    steps: pl.DataFrame
    """STEP_MEMORY_SCHEMA."""
    stages: pl.DataFrame
    """STAGE_BYTES_SCHEMA."""
    timeline: pl.DataFrame
    """TIMELINE_SCHEMA."""
    simulated: str | None
    """How the simulated peaks were found (``named 1f1b``, ``realized order``); None: not found."""
    notes: tuple[str, ...]
    """What a reader must know: no memory events, no simulated peaks and why, ranks left out."""


def no_memory(note: str) -> Memory:
    """A run's memory when there is none to measure, saying why."""
    return _empty((note,))


def _empty(notes: tuple[str, ...]) -> Memory:
    return Memory(
        False,
        pl.DataFrame(schema=RANK_MEMORY_SCHEMA),
        pl.DataFrame(schema=STEP_MEMORY_SCHEMA),
        pl.DataFrame(schema=STAGE_BYTES_SCHEMA),
        pl.DataFrame(schema=TIMELINE_SCHEMA),
        None,
        notes,
    )


def run_memory(
    run: Run, actions: pl.DataFrame, pipeline_rank: Callable[[int], int]
) -> Memory:
    """The memory of ``run`` whose labelled actions (CPU spans, REALIZED_SCHEMA) are ``actions``."""
    from tracekit.analysis.memory_schedule import simulated_peaks  # here: it loads the simulator and numpy

    cuts = dict(zip(run.ranks, run.cut_ns or (None,) * len(run.ranks)))
    traces = {info.rank: read_memory_events(info.path, info.rank, cuts.get(info.rank)) for info in run.traces}
    unrecorded = sorted(rank for rank, trace in traces.items() if not trace.recorded)
    if len(unrecorded) == len(traces):
        return _empty((NOT_RECORDED,))
    notes: list[str] = []
    if unrecorded:
        notes.append(f"ranks {unrecorded} recorded no memory events: left out of the memory figures")
    metas = read_sidecars([info.path for info in run.traces])
    memories: dict[int, RankMemory | None] = {meta.rank: meta.memory for meta in metas.values()}
    if any(memories.get(rank) is None for rank in traces if rank not in unrecorded):
        notes.append(
            "some ranks' sidecars hold no stage state bytes: their parameters, gradients and optimizer "
            "state are not separated from the rest, and no prediction is made"
        )
    replica = actions.filter(pl.col("replica") == 0)
    places = {rank: pipeline_rank(rank) for rank in replica["rank"].unique().to_list()}
    one_pipeline = replica.with_columns(pl.col("rank").replace_strict(places, return_dtype=pl.Int32()))
    simulated, reason = simulated_peaks(run.manifest, one_pipeline)
    if reason is not None:
        notes.append(f"simulated peaks: {reason}")
    frames = []
    for rank, trace in sorted(traces.items()):
        if rank in unrecorded:
            continue
        rank_actions = actions.filter(pl.col("rank") == rank)
        if rank_actions.is_empty():
            notes.append(f"rank {rank} has no labelled actions: left out of the memory figures")
            continue
        peak = None
        if simulated is not None and memories.get(rank) is not None:
            index = pipeline_rank(rank)
            peak = simulated.peaks[index] if index < len(simulated.peaks) else None
        spr = simulated.stages_per_rank if simulated is not None else int(rank_actions["stage"].n_unique())
        inputs = RankInputs(rank, trace, rank_actions, memories.get(rank), spr, peak)
        frames.append((analyse_rank(inputs), memories.get(rank)))
    if not frames:
        return _empty((*notes, NOT_RECORDED))
    return Memory(
        recorded=not unrecorded,
        ranks=pl.DataFrame([rank_summary(f, m) for f, m in frames], schema=RANK_MEMORY_SCHEMA),
        steps=pl.concat([f.steps for f, _ in frames]),
        stages=pl.concat([f.stages for f, _ in frames]),
        timeline=pl.concat([f.timeline for f, _ in frames]),
        simulated=None if simulated is None else simulated.source,
        notes=tuple(notes),
    )
