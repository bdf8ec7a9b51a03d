"""The memory analysis on hand-made allocations: in-flight counts, parts, the leak rule, no memory."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.manifest import RankMemory, StageMemory
from tracekit.analysis.memory import RankInputs, analyse_rank
from tracekit.analysis.memory_findings import rank_summary
from tracekit.analysis.realized import REALIZED_SCHEMA
from tracekit.run_analysis import analyse
from tracekit.trace.memory_events import MEMORY_EVENT_SCHEMA, MemoryTrace

MB = 1000  # bytes one micro-batch's forward keeps


def _actions(rows: list[tuple[str, int, int, int]], step: int = 0) -> pl.DataFrame:
    """(kind, micro-batch, start, end) rows of rank 0, stage 0."""
    return pl.DataFrame(
        {
            "rank": [0] * len(rows),
            "replica": [0] * len(rows),
            "step": [step] * len(rows),
            "stage": [0] * len(rows),
            "kind": [r[0] for r in rows],
            "microbatch": [r[1] for r in rows],
            "start_ns": [r[2] for r in rows],
            "end_ns": [r[3] for r in rows],
            "overlapped": [False] * len(rows),
            "source": ["tracekit"] * len(rows),
        },
        schema=REALIZED_SCHEMA,
    )


def _events(blocks: list[tuple[int, int, int | None]]) -> pl.DataFrame:
    """(alloc time, bytes, free time or None) blocks as memory events with running totals."""
    changes = sorted(
        [(t, b, addr) for addr, (t, b, _) in enumerate(blocks)]
        + [(f, -b, addr) for addr, (_, b, f) in enumerate(blocks) if f is not None]
    )
    total, rows = 0, []
    for t, b, addr in changes:
        total += b
        rows.append((0, t, b, total, 0, 0, -1, addr))
    return pl.DataFrame(rows, schema=MEMORY_EVENT_SCHEMA, orient="row")


def _inputs(actions: pl.DataFrame, events: pl.DataFrame, simulated: float | None = 2.0) -> RankInputs:
    memory = RankMemory(True, "cpu", None, (StageMemory(0, 10, 40, 40, 0),))
    return RankInputs(0, MemoryTrace(0, True, events), actions, memory, 1, simulated)


# F0 F1 B0 B1 on one stage: two micro-batches in flight at the peak.
ACTIONS = _actions([("F", 0, 0, 10), ("F", 1, 10, 20), ("B", 0, 20, 30), ("B", 1, 30, 40)])
BLOCKS = [(2, MB, 25), (12, MB, 35), (5, 50, 7)]  # each forward keeps MB; a 50-byte temporary


def test_in_flight_parts_and_bytes_per_microbatch() -> None:
    frames = analyse_rank(_inputs(ACTIONS, _events(BLOCKS)))
    (stage,) = frames.stages.iter_rows(named=True)
    assert stage["bytes_per_microbatch"] == MB
    (step,) = frames.steps.iter_rows(named=True)
    assert step["peak_in_flight"] == 2.0 and step["in_flight_at_peak"] == 2.0
    assert step["peak_bytes"] == 40 + 2 * MB  # parameters (resident on CPU) + two micro-batches
    assert step["activation_bytes"] == 2 * MB and step["rest_bytes"] == 0
    assert step["predicted_bytes"] == 40 + 40 + 2 * MB  # the planner counts the gradients too


def test_a_forward_outliving_its_step_is_an_extra_activation() -> None:
    leaky = [(2, MB, 25), (12, MB, 35), (3, 2 * MB, None)]  # F0 keeps copies of its tensors past the step
    frames = analyse_rank(_inputs(ACTIONS, _events(leaky)))
    row = rank_summary(frames, None)
    assert row["holds_more_than_schedule"] and "extra activation held" in row["finding"]


def test_more_in_flight_than_simulated_is_named_as_waiting() -> None:
    frames = analyse_rank(_inputs(ACTIONS, _events(BLOCKS), simulated=1.0))
    row = rank_summary(frames, None)
    assert row["holds_more_than_schedule"] and "it waited" in row["finding"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 39), st.integers(1, 5000), st.integers(1, 30)), max_size=12))
def test_parts_always_add_up_to_the_peak(blocks: list[tuple[int, int, int]]) -> None:
    events = _events([(t, b, t + life if t + life < 60 else None) for t, b, life in blocks])
    (step,) = analyse_rank(_inputs(ACTIONS, events)).steps.iter_rows(named=True)
    parts = ("param_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes", "kept_bytes", "rest_bytes")
    assert sum(step[p] for p in parts) == step["peak_bytes"]
    assert step["peak_bytes"] >= 40


def test_samples_without_memory_events_give_a_note_not_zeros() -> None:
    memory = analyse("sample_traces/1f1b").memory
    assert not memory.recorded and memory.ranks.is_empty()
    assert "no memory events" in memory.notes[0]
