"""Memory per rank and step, measured from the profiler's memory events and set against the schedule.

Inputs: each rank's memory events (``tracekit.trace.memory_events``), its labelled actions on
their CPU spans (``REALIZED_SCHEMA``: the allocations happen on the CPU clock, so the actions'
CPU spans, not a GPU projection, say which action allocated what), its sidecar's stage state
bytes (``collectors.manifest.RankMemory``) and the simulator's peak in-flight counts for the same
schedule (``tracekit.analysis.memory_ideal``). Every definition below is quoted in docs/memory.md.

- **allocated** at a time: the device's allocated bytes after the last memory event before it. On
  CUDA the allocator's own total; on CPU, where torch counts from the profiler's start only, the
  events' total plus the parameter and optimizer-state bytes (resident before the window).
- **blocks**: each allocation paired with the next event at its address (its free).
- **bytes per micro-batch** of a stage: median over the window's forwards of that stage of the
  bytes allocated during the forward and still allocated at its end (what one micro-batch holds).
- **in flight**: micro-batches of a stage whose forward started and whose backward for inputs
  (B or I) has not ended; the rank's count is the sum over its stages, in rank-share units
  (divided by the schedule's stages per rank, as ``tracekit.schedule.metrics.peak_activations``).
- **kept past its backward**: bytes a forward allocated that are still allocated after its
  micro-batch's backward (B or I) ended; a stage's usual amount is the median over its
  micro-batches. A micro-batch whose forward leaves at least a whole micro-batch's bytes more
  allocated into the rank's next step (never freed, in the window's last step) than the least any
  other micro-batch of that stage and step leaves is an **extra activation** held: more than the
  schedule needs.
- per step, **peak**: the most allocated between the step's first action start and last action end;
  its **parts** at that moment: parameters, gradients (the stages with a backward started by then),
  optimizer state, **activations** (in flight x bytes per micro-batch, per stage), **kept**
  (forwards' bytes kept past their backward, or from earlier steps) and the **rest** (peak minus
  the others: the batch, buffers, transients).
- **predicted**: ``tracekit.schedule.metrics.rank_bytes`` (the planner's formula) with the measured
  bytes per parameter and per micro-batch, the simulated peak, and as reserve the bytes the step
  started with beyond the model state.

Not for: the per-rank summary and its words (``tracekit.analysis.memory_findings``), reading traces
(``tracekit.trace``), simulating (``tracekit.schedule``), presenting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from collectors.manifest import RankMemory
from tracekit.schedule.metrics import rank_bytes
from tracekit.trace.memory_events import CPU, CUDA, MemoryTrace

if TYPE_CHECKING:
    import numpy as np

STAGE_BYTES_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "stage": pl.Int32(),
    "params": pl.Int64(),
    "param_bytes": pl.Int64(),
    "grad_bytes": pl.Int64(),
    "optimizer_bytes": pl.Int64(),
    "bytes_per_microbatch": pl.Int64(),
    "forwards": pl.Int32(),
    "kept_per_microbatch": pl.Int64(),
    "extra_kept_bytes": pl.Int64(),
    "extra_kept_microbatches": pl.Int32(),
}
"""Per rank and stage: sidecar state bytes (null without a sidecar), bytes one micro-batch holds
(median over the forwards), bytes usually kept past a backward, and the largest extra kept by one
micro-batch beyond that, with how many micro-batch instances kept at least a micro-batch more."""

STEP_MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "peak_bytes": pl.Int64(),
    "peak_at_ms": pl.Float64(),
    "param_bytes": pl.Int64(),
    "grad_bytes": pl.Int64(),
    "optimizer_bytes": pl.Int64(),
    "activation_bytes": pl.Int64(),
    "kept_bytes": pl.Int64(),
    "rest_bytes": pl.Int64(),
    "in_flight_at_peak": pl.Float64(),
    "peak_in_flight": pl.Float64(),
    "simulated_peak_in_flight": pl.Float64(),
    "predicted_bytes": pl.Int64(),
    "difference_pct": pl.Float64(),
    "differing_part": pl.String(),
    "reserved_bytes": pl.Int64(),
}
"""Per rank and step: the peak (bytes, ms after the step's first action), its parts, the in-flight
count at the peak and its maximum over the step (rank-share units), the simulator's peak (null
when no schedule could be simulated), the prediction (null with it), (peak - predicted) /
predicted in %, the part whose measured value differs most from its predicted one (null within
10%), and the reserved bytes at the peak (CUDA; 0 on CPU)."""

TIMELINE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "t_ms": pl.Float64(),
    "allocated_bytes": pl.Int64(),
    "schedule_bytes": pl.Int64(),
    "in_flight": pl.Float64(),
}
"""Per rank and step, at each memory event and each in-flight change: ms after the step's first
action, allocated bytes, what the schedule accounts for at that moment (parameters, optimizer
state, gradients allocated by then, activations in flight and the bytes the step started with
beyond the model state) and the in-flight count (rank-share units)."""

DEFINITIONS: dict[str, str] = {
    "allocated": "the device's allocated bytes after the last memory event; on CPU the profiler's total "
    "(counted from the window's start) plus the sidecar's parameter and optimizer bytes",
    "bytes_per_microbatch": "median over a stage's forwards of the bytes allocated during the forward and "
    "still allocated at its end",
    "in_flight": "micro-batches whose forward started and whose backward for inputs (B or I) has not ended, "
    "summed over the rank's stages, divided by the schedule's stages per rank",
    "peak": "most allocated bytes between the step's first action start and last action end",
    "parts": "at the peak: parameters, gradients (stages with a backward started), optimizer state, "
    "activations (in flight x bytes per micro-batch), kept (forwards' bytes past their backward), "
    "rest (the remainder: batch, buffers, transients)",
    "predicted": "the planner's formula (tracekit.schedule.metrics.rank_bytes): parameters + gradients + "
    "optimizer + simulated peak in flight x bytes per micro-batch x stages per rank + reserve (bytes the "
    "step started with beyond the model state, plus the median backward's workspace)",
    "differing_part": "when the peak is more than 10% off the prediction: the part whose measured value is "
    "farthest from its predicted one",
    "holds_more_than_schedule": "more micro-batches in flight than the simulator's peak, or a forward "
    "leaving a whole micro-batch's bytes more into the next step than the least its stage's other "
    "micro-batches of that step leave",
}
"""Every memory figure's definition, quoted by ``tracekit report``, the dashboard and docs/memory.md."""

TOLERANCE = 0.10
"""A peak within this fraction of its prediction names no differing part."""
EXTRA_KEPT_FRACTION = 1.0
"""A micro-batch keeping this fraction of a micro-batch's bytes more than its stage usually keeps
holds an extra activation."""
KEPT_NOTED = 0.25
"""A stage whose micro-batches usually keep this fraction of their bytes past their backward is named."""
NEAR_CAPACITY = 0.10
"""A peak within this fraction of the device's capacity is called out."""
_BACKWARD = ("B", "I")


@dataclass(frozen=True)
class RankInputs:
    """What one rank's memory analysis reads."""

    rank: int
    trace: MemoryTrace
    actions: pl.DataFrame
    """The rank's labelled actions, REALIZED_SCHEMA, CPU spans."""
    memory: RankMemory | None
    """Its sidecar's memory facts; None for captures without them."""
    stages_per_rank: int
    """The schedule's stages per rank (rank-share unit of the in-flight count)."""
    simulated_peak: float | None
    """The simulator's peak in-flight count for this rank (rank-share units); None when unknown."""


@dataclass(frozen=True)
class RankFrames:
    """One rank's frames (the schemas above)."""

    stages: pl.DataFrame
    steps: pl.DataFrame
    timeline: pl.DataFrame


def _device_events(inputs: RankInputs) -> tuple[pl.DataFrame, bool]:
    """The memory events of the device the rank computed on, and whether it is CUDA."""
    events = inputs.trace.events
    device = inputs.memory.device if inputs.memory is not None else None
    if device is not None and device.startswith("cuda:"):
        index = int(device.split(":", 1)[1])
        return events.filter((pl.col("device_type") == CUDA) & (pl.col("device") == index)), True
    if device is None and (events["device_type"] == CUDA).any():
        busiest = events.filter(pl.col("device_type") == CUDA)["device"].mode().sort()[0]
        return events.filter((pl.col("device_type") == CUDA) & (pl.col("device") == busiest)), True
    return events.filter(pl.col("device_type") == CPU), False


def _blocks(events: pl.DataFrame) -> pl.DataFrame:
    """Allocations (ts_ns, bytes) with free_ns: the next event at their address (null: never freed)."""
    return (
        events.with_row_index("order")
        .sort("addr", "ts_ns", "order")
        .with_columns(pl.col("ts_ns").shift(-1).over("addr").alias("free_ns"))
        .filter(pl.col("bytes") > 0)
        .sort("ts_ns", "order")
        .select("ts_ns", "bytes", "free_ns")
    )


@dataclass(frozen=True)
class _Forwards:
    """The rank's forwards with what they allocated (arrays, one entry per forward)."""

    step: np.ndarray
    stage: np.ndarray
    microbatch: np.ndarray
    start: np.ndarray
    end: np.ndarray
    backward_end: np.ndarray
    """End of the same (step, stage, micro-batch)'s B or I; int64 max when it never ran."""
    held: np.ndarray
    """Bytes allocated during the forward and still allocated at its end."""
    kept: np.ndarray
    """Of those, bytes still allocated after its backward ended."""
    outlived: np.ndarray
    """Of those, bytes still allocated when the rank's next step starts (never freed, for the last step)."""
    owner: np.ndarray
    """Per block: the forward that allocated it and held it at its end, else -1."""


_NEVER = 2**63 - 1


def _forwards(
    actions: pl.DataFrame, block_ts: np.ndarray, block_bytes: np.ndarray, block_free: np.ndarray
) -> _Forwards:
    import numpy as np  # here, not at the top: a run without memory events never needs it

    keys = ["step", "stage", "microbatch"]
    backward = (
        actions.filter(pl.col("kind").is_in(_BACKWARD))
        .group_by(keys)
        .agg(pl.col("end_ns").min().alias("backward_end"))
    )
    forwards = (
        actions.filter(pl.col("kind") == "F")
        .join(backward, on=keys, how="left")
        .sort("start_ns")
        .with_columns(pl.col("backward_end").fill_null(_NEVER))
    )
    start, end = forwards["start_ns"].to_numpy(), forwards["end_ns"].to_numpy()
    backward_end = forwards["backward_end"].to_numpy()
    step_starts = actions.group_by("step").agg(pl.col("start_ns").min()).sort("step")
    next_start = dict(
        zip(step_starts["step"].to_list(), [*step_starts["start_ns"].to_list()[1:], _NEVER - 1])
    )
    step_of = forwards["step"].to_numpy()
    held = np.zeros(len(start), np.int64)
    kept = np.zeros(len(start), np.int64)
    outlived = np.zeros(len(start), np.int64)
    owner = np.full(len(block_ts), -1, np.int64)
    first = np.searchsorted(block_ts, start, side="left")
    last = np.searchsorted(block_ts, end, side="right")
    for index in range(len(start)):
        span = slice(first[index], last[index])
        alive = block_free[span] > end[index]
        held[index] = block_bytes[span][alive].sum()
        kept[index] = block_bytes[span][alive & (block_free[span] > backward_end[index])].sum()
        outlived[index] = block_bytes[span][alive & (block_free[span] > next_start[step_of[index]])].sum()
        chosen = np.arange(first[index], last[index])[alive]
        owner[chosen] = index
    return _Forwards(
        forwards["step"].to_numpy(),
        forwards["stage"].to_numpy(),
        forwards["microbatch"].to_numpy(),
        start,
        end,
        backward_end,
        held,
        kept,
        outlived,
        owner,
    )


def _stage_state(memory: RankMemory | None) -> dict[int, tuple[int, int, int, int]]:
    """Stage -> (params, param bytes, grad bytes, optimizer bytes) from the sidecar."""
    if memory is None:
        return {}
    return {s.stage: (s.params, s.param_bytes, s.grad_bytes, s.optimizer_bytes) for s in memory.stages}


def _stage_frame(rank: int, fw: _Forwards, state: dict[int, tuple[int, int, int, int]]) -> pl.DataFrame:
    import numpy as np  # here, not at the top: a run without memory events never needs it

    rows: dict[str, list] = {name: [] for name in STAGE_BYTES_SCHEMA}
    for stage in sorted(set(fw.stage.tolist()) | set(state)):
        mask = fw.stage == stage
        per_mb = int(np.median(fw.held[mask])) if mask.any() else 0
        usual = int(np.median(fw.kept[mask])) if mask.any() else 0
        # Per step: a micro-batch whose forward's bytes outlive the step, beyond the least any of
        # the stage's micro-batches of that step leaves behind (the last stage's kept outputs).
        extra = np.zeros(int(mask.sum()), np.int64)
        steps_here = fw.step[mask]
        for step in set(steps_here.tolist()):
            outlived = fw.outlived[mask][steps_here == step]
            extra[steps_here == step] = outlived - int(outlived.min())
        over = extra >= max(EXTRA_KEPT_FRACTION * per_mb, 1)
        params, param_bytes, grad_bytes, optimizer_bytes = state.get(stage, (None, None, None, None))
        values = (
            rank, stage, params, param_bytes, grad_bytes, optimizer_bytes, per_mb, int(mask.sum()),
            usual, int(extra.max()) if mask.any() else 0, int(over.sum()),
        )
        for name, value in zip(STAGE_BYTES_SCHEMA, values):
            rows[name].append(value)
    return pl.DataFrame(rows, schema=STAGE_BYTES_SCHEMA)


def _in_flight_changes(actions: pl.DataFrame, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, stages, +1/-1) of one step's in-flight changes, releases first at equal times."""
    rows = actions.filter(pl.col("step") == step)
    starts = rows.filter(pl.col("kind") == "F").select(
        pl.col("start_ns").alias("t"), "stage", pl.lit(1).alias("change")
    )
    ends = rows.filter(pl.col("kind").is_in(_BACKWARD)).select(
        pl.col("end_ns").alias("t"), "stage", pl.lit(-1).alias("change")
    )
    changes = pl.concat([starts, ends]).sort("t", "change")
    return changes["t"].to_numpy(), changes["stage"].to_numpy(), changes["change"].to_numpy()


def workspace_bytes(actions: pl.DataFrame, event_ts: np.ndarray, allocated: np.ndarray, resident: int) -> int:
    """The most, over the backward kinds (B, I, W), of the median rise of allocated bytes within one
    action above its start: the transient workspace a backward needs on top of what is held."""
    import numpy as np  # here, not at the top: a run without memory events never needs it

    medians = []
    for kind in ("B", "I", "W"):
        rows = actions.filter(pl.col("kind") == kind)
        if rows.is_empty():
            continue
        start, end = rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy()
        before = np.searchsorted(event_ts, start, side="right") - 1
        last = np.searchsorted(event_ts, end, side="right")
        rises = []
        for b, e in zip(before, last):
            at_start = allocated[b] if b >= 0 else resident
            inside = allocated[b + 1 : e]
            rises.append(max(int(inside.max()) - int(at_start), 0) if len(inside) else 0)
        medians.append(int(np.median(rises)))
    return max(medians, default=0)


def analyse_rank(inputs: RankInputs) -> RankFrames:
    """The rank's stage, step and timeline frames (schemas above)."""
    import numpy as np  # here, not at the top: a run without memory events never needs it

    events, _cuda = _device_events(inputs)
    state = _stage_state(inputs.memory)
    param_total = sum(v[1] for v in state.values())
    optimizer_total = sum(v[3] for v in state.values())
    resident = 0 if _cuda else param_total + optimizer_total
    blocks = _blocks(events)
    block_ts = blocks["ts_ns"].to_numpy()
    block_bytes = blocks["bytes"].to_numpy()
    block_free = blocks["free_ns"].fill_null(_NEVER).to_numpy()
    actions = inputs.actions
    fw = _forwards(actions, block_ts, block_bytes, block_free)
    stages = _stage_frame(inputs.rank, fw, state)
    per_mb = dict(zip(stages["stage"].to_list(), stages["bytes_per_microbatch"].to_list()))
    event_ts = events["ts_ns"].to_numpy()
    allocated = events["allocated_bytes"].to_numpy() + resident
    reserved = events["reserved_bytes"].to_numpy()
    spr = max(inputs.stages_per_rank, 1)
    backward_starts = actions.filter(pl.col("kind").is_in(("B", "I", "W")))
    workspace = workspace_bytes(actions, event_ts, allocated, resident)
    step_rows: dict[str, list] = {name: [] for name in STEP_MEMORY_SCHEMA}
    timeline: list[pl.DataFrame] = []
    for step in sorted(actions["step"].unique().to_list()):
        rows = actions.filter(pl.col("step") == step)
        first, last = int(rows["start_ns"].min()), int(rows["end_ns"].max())  # type: ignore[arg-type]
        before = np.searchsorted(event_ts, first, side="right") - 1
        base = int(allocated[before]) if before >= 0 else resident
        inside = slice(before + 1, np.searchsorted(event_ts, last, side="right"))
        times = np.concatenate([[first], event_ts[inside]])
        values = np.concatenate([[base], allocated[inside]])
        peak_index = int(np.argmax(values))
        peak, at = int(values[peak_index]), int(times[peak_index])
        change_t, change_stage, change = _in_flight_changes(actions, step)
        flight_after = np.cumsum(change) / spr
        bytes_after = np.cumsum(change * np.array([per_mb.get(int(s), 0) for s in change_stage], np.int64))
        first_backward = (
            backward_starts.filter(pl.col("step") == step).group_by("stage").agg(pl.col("start_ns").min())
        ).sort("start_ns")
        grad_t = first_backward["start_ns"].to_numpy()
        grad_after = np.cumsum([state[s][2] if s in state else 0 for s in first_backward["stage"].to_list()])

        def at_times(series: np.ndarray, series_t: np.ndarray, t: np.ndarray) -> np.ndarray:
            index = np.searchsorted(series_t, t, side="right") - 1
            return np.where(index >= 0, series[np.maximum(index, 0)] if len(series) else 0, 0)

        def kept_at(t: int) -> int:
            owned = fw.owner >= 0
            alive = owned & (block_ts <= t) & (block_free > t)
            owner = fw.owner[alive]
            past = (fw.backward_end[owner] <= t) | (fw.step[owner] < step)
            return int(block_bytes[alive][past].sum())

        earlier = (fw.owner >= 0) & (block_ts <= first) & (block_free > first)
        earlier_bytes = int(block_bytes[earlier][fw.step[fw.owner[earlier]] < step].sum())
        reserve = base - param_total - optimizer_total - earlier_bytes
        peak_in_flight = float(flight_after.max()) if len(flight_after) else 0.0
        now = np.array([at])
        parts = {
            "params": param_total,
            "gradients": int(at_times(grad_after, grad_t, now)[0]),
            "optimizer": optimizer_total,
            "activations": int(at_times(bytes_after, change_t, now)[0]),
            "kept": kept_at(at),
        }
        parts["rest"] = peak - sum(parts.values())
        in_flight_now = float(at_times(flight_after, change_t, now)[0])
        predicted = difference = differing = None
        if inputs.simulated_peak is not None and per_mb:
            mean_mb = float(np.mean([per_mb[s] for s in per_mb]))
            predicted = int(
                rank_bytes(param_total, sum(v[2] for v in state.values()), optimizer_total,
                           inputs.simulated_peak, mean_mb, spr, reserve + workspace)
            )
            difference = 100.0 * (peak - predicted) / predicted if predicted > 0 else None
            expected = {
                "params": param_total,
                "gradients": sum(v[2] for v in state.values()),
                "optimizer": optimizer_total,
                "activations": int(inputs.simulated_peak * spr * mean_mb),
                "kept": 0,
                "rest": reserve + workspace,
            }
            if difference is not None and abs(difference) > 100 * TOLERANCE:
                differing = max(expected, key=lambda part: abs(parts[part] - expected[part]))
        reserved_at = int(reserved[inside][peak_index - 1]) if peak_index > 0 else 0
        values_out = (
            inputs.rank, step, peak, (at - first) / 1e6, parts["params"], parts["gradients"],
            parts["optimizer"], parts["activations"], parts["kept"], parts["rest"], in_flight_now,
            peak_in_flight, inputs.simulated_peak, predicted, difference, differing, reserved_at,
        )
        for name, value in zip(STEP_MEMORY_SCHEMA, values_out):
            step_rows[name].append(value)
        sample_t = np.unique(np.concatenate([times, change_t]))
        sample_alloc = values[np.searchsorted(times, sample_t, side="right") - 1]
        schedule_line = (
            param_total
            + optimizer_total
            + reserve
            + at_times(grad_after, grad_t, sample_t)
            + at_times(bytes_after, change_t, sample_t)
        )
        flight = at_times(flight_after, change_t, sample_t).astype(np.float64)
        timeline.append(
            pl.DataFrame(
                {
                    "rank": [inputs.rank] * len(sample_t),
                    "step": [step] * len(sample_t),
                    "t_ms": (sample_t - first) / 1e6,
                    "allocated_bytes": sample_alloc,
                    "schedule_bytes": schedule_line,
                    "in_flight": flight,
                },
                schema=TIMELINE_SCHEMA,
            )
        )
    steps = pl.DataFrame(step_rows, schema=STEP_MEMORY_SCHEMA)
    frames = pl.concat(timeline) if timeline else pl.DataFrame(schema=TIMELINE_SCHEMA)
    return RankFrames(stages, steps, frames)

