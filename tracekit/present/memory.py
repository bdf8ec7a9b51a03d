"""``tracekit report``'s memory column group: peak per rank beside its ideal, as a table and JSON.

The table is in MiB (2^20 bytes), one row per rank: the measured peak, the ideal (the planner's
formula with the run's measured bytes per parameter and per micro-batch and the simulator's peak
in-flight count), their difference, the in-flight micro-batches at the peak against the
simulator's, the state bytes and the finding. The JSON (``memory`` in the report document) keeps
bytes. A run whose traces recorded no memory gets no columns and one note saying why: never zeros.

Not for: computing the figures (``tracekit.analysis.memory``) or printing.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.analysis.memory import DEFINITIONS
from tracekit.analysis.memory_run import Memory
from tracekit.present.result import Table
from tracekit.run_analysis import RunAnalysis

_MIB = float(2**20)


def _mib(column: str, name: str) -> pl.Expr:
    return (pl.col(column) / _MIB).round(2).alias(name)


def memory_frame(memory: Memory) -> pl.DataFrame:
    """One row per rank, MiB: peak, ideal, difference, in flight beside the simulator, state, finding."""
    return memory.ranks.select(
        "rank",
        _mib("peak_bytes", "peak_mib"),
        _mib("predicted_bytes", "ideal_mib"),
        pl.col("difference_pct").round(1).alias("vs_ideal_pct"),
        pl.col("peak_in_flight").alias("in_flight"),
        pl.col("simulated_peak_in_flight").alias("ideal_in_flight"),
        _mib("param_bytes", "params_mib"),
        _mib("grad_bytes", "grads_mib"),
        _mib("optimizer_bytes", "optimizer_mib"),
        _mib("bytes_per_microbatch", "per_mb_mib"),
        pl.col("holds_more_than_schedule").alias("holds_more"),
        pl.col("finding").fill_null(""),
    )


def memory_notes(memory: Memory) -> tuple[str, ...]:
    """The notes printed under the table: what the ideal is, how it was simulated, the run's notes."""
    simulated = ""
    if memory.simulated:
        simulated = f"ideal in flight: the simulator's peak_activations ({memory.simulated})"
    definitions = tuple(f"{name}: {text}" for name, text in DEFINITIONS.items())
    return tuple(note for note in (simulated, *memory.notes) if note) + definitions


def memory_tables(analysis: RunAnalysis) -> list[Table]:
    """The report's memory tables; none when the traces hold no memory events (the note says so)."""
    memory = analysis.memory
    if memory.ranks.is_empty():
        return []
    return [
        Table(
            title="memory per rank: peak beside the schedule's ideal (MiB)",
            frame=memory_frame(memory),
            notes=memory_notes(memory),
            name="memory",
        ),
        Table(title="memory per rank and step", frame=memory.steps, name="memory_steps", shown=False),
        Table(title="memory per stage", frame=memory.stages, name="memory_stages", shown=False),
        Table(title="memory over the step", frame=memory.timeline, name="memory_timeline", shown=False),
    ]


def absent_note(analysis: RunAnalysis) -> tuple[str, ...]:
    """The note the ranks table carries when there are no memory columns, else nothing."""
    memory = analysis.memory
    return memory.notes if memory.ranks.is_empty() else ()


def memory_payload(analysis: RunAnalysis) -> dict[str, Any]:
    """The ``memory`` section of the report's JSON: bytes, one row per rank, step and stage."""
    memory = analysis.memory
    return {
        "recorded": memory.recorded,
        "unit": "bytes",
        "simulated": memory.simulated,
        "definitions": DEFINITIONS,
        "ranks": memory.ranks.to_dicts(),
        "steps": memory.steps.to_dicts(),
        "stages": memory.stages.to_dicts(),
        "notes": list(memory.notes),
    }
