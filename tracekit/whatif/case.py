"""A run ready to replay: its dependency graph plus one row per op instance.

Both inputs (the op-table of the paper's artifact, tracekit's realized actions from Kineto traces)
become a ``ReplayCase``; every what-if and straggler analysis takes one.

``ops`` schema (``OPS_SCHEMA``), one row per op instance:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| node | Int32 | template node of the dependency graph | never null |
| slot | Int32 | replica position along the step axis (op-table: the step; Kineto: 0) | never null |
| dp | Int32 | replica position along the data-parallel axis (0 when there is one replica) | never null |
| step | Int64 | training step | never null |
| dp_rank | Int32 | data-parallel rank of the worker | never null |
| stage | Int32 | pipeline stage (an overlapped F&B pair counts toward its forward half's stage) | never null |
| rank | Int32 | global rank of the worker | never null |
| optype | String | op type (op-table ``optype``; Kineto ``F``, ``B``, ``I``, ``W``, ``F&B``) | never null |
| attribution_type | String | op-type group the slowdown is attributed to (p2p send and recv merged) | never null |
| ideal_stat | String | ``mean`` or ``median``: how the op type's typical duration is taken | never null |
| compute | Boolean | True for compute ops, the only ones straggler scoring judges | never null |
| work | String | what the op computes beyond its type, to find peers doing comparable work (op-table: ``stage 3``; Kineto: the stage's place on the micro-batch's path, ``first``, ``middle``, ``last``) | never null |
| duration_ms | Float64 | ms the op occupies once unblocked: run time, or for a synchronizing op its transfer time after the last peer arrived | never null |
| gap_ms | Float64 | ms from the op being ready (what it depends on has ended) to its recorded start: transfer latency, launch and host work between actions (Kineto; negative when it started before, as an overlapped pair's backward half waits for its input inside the pair); 0 for op-tables, whose durations hold what an op occupies | never null |

``measured`` schema: step (Int64), measured_ms (Float64: wall span of the step as recorded).

Not for: computing anything from the rows (``tracekit.whatif.attribution``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from tracekit.schedule.timing import NodeTimes, replay
from tracekit.whatif.graph import DependencyGraph

OPS_SCHEMA: dict[str, pl.DataType] = {
    "node": pl.Int32(),
    "slot": pl.Int32(),
    "dp": pl.Int32(),
    "step": pl.Int64(),
    "dp_rank": pl.Int32(),
    "stage": pl.Int32(),
    "rank": pl.Int32(),
    "optype": pl.String(),
    "attribution_type": pl.String(),
    "ideal_stat": pl.String(),
    "compute": pl.Boolean(),
    "work": pl.String(),
    "duration_ms": pl.Float64(),
    "gap_ms": pl.Float64(),
}

MEASURED_SCHEMA: dict[str, pl.DataType] = {"step": pl.Int64(), "measured_ms": pl.Float64()}


@dataclass(frozen=True)
class ReplayCase:
    """A dependency graph and the op instances that fill it, checked to cover every cell once."""

    graph: DependencyGraph
    ops: pl.DataFrame
    measured: pl.DataFrame
    source: str
    """What the case was read from: ``op-table`` or ``kineto``."""
    shape: tuple[int, int, int] = field(init=False)
    steps: tuple[int, ...] = field(init=False)
    _cells: tuple[np.ndarray, np.ndarray, np.ndarray] = field(init=False, repr=False)
    _step_code: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        assert dict(self.ops.schema) == OPS_SCHEMA, dict(self.ops.schema)
        assert dict(self.measured.schema) == MEASURED_SCHEMA, dict(self.measured.schema)
        steps = tuple(sorted(self.ops["step"].unique().to_list()))
        assert steps == tuple(sorted(self.measured["step"].to_list())), "measured steps differ from ops"
        node, slot, dp = (self.ops[c].to_numpy().astype(np.intp) for c in ("node", "slot", "dp"))
        shape = (self.graph.size, int(slot.max()) + 1, int(dp.max()) + 1)
        assert self.ops.height == shape[0] * shape[1] * shape[2], "ops do not fill the replica grid"
        flat = np.ravel_multi_index((node, slot, dp), shape)
        assert np.unique(flat).size == flat.size, "an op instance appears twice"
        position = {step: index for index, step in enumerate(steps)}
        code = np.full(shape[:2], -1, dtype=np.intp)
        code[node, slot] = [position[s] for s in self.ops["step"].to_list()]
        assert (code >= 0).all()
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "_cells", (node, slot, dp))
        object.__setattr__(self, "_step_code", code)

    @property
    def cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row of ``ops``: its (node, slot, dp) cell of the engine's array."""
        return self._cells

    @property
    def step_index(self) -> np.ndarray:
        """(nodes, slots): the position in ``steps`` of the step each cell belongs to."""
        return self._step_code

    def matrix(self, values: np.ndarray) -> np.ndarray:
        """Per-row ``values`` (aligned with ``ops``) laid out as the engine's ``(nodes, slots, dp)`` array."""
        assert values.shape == (self.ops.height,)
        out = np.empty(self.shape, dtype=np.float64)
        out[self._cells] = values
        return out

    def replay(self, durations: np.ndarray) -> NodeTimes:
        """Replay the graph with per-row ``durations`` (aligned with ``ops``) on the timing engine."""
        return replay(self.graph.timing, self.matrix(durations))

    def step_times(self, timeline: NodeTimes) -> np.ndarray:
        """Replayed time of each step in ``steps`` order: the last end, since every step starts at 0."""
        times = np.zeros(len(self.steps))
        np.maximum.at(times, self._step_code.ravel(), timeline.end.max(axis=2).ravel())
        return times

    def replay_step_times(self, durations: np.ndarray) -> np.ndarray:
        """``step_times(replay(durations))``."""
        return self.step_times(self.replay(durations))

    def occupied_ms(self, durations_ms: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """What ops ``rows`` (every op when None) occupy in a replay when they run ``durations_ms``.

        Duration plus gap, at least 0: each op then starts its ``gap_ms`` after what it waits for
        has ended, as it did in the run; with the recorded durations, the replay reruns the
        recorded steps.
        """
        gaps = self.ops["gap_ms"].to_numpy()
        return np.maximum(durations_ms + (gaps if rows is None else gaps[rows]), 0.0)

    def measured_ms(self) -> np.ndarray:
        """Measured step spans in ``steps`` order."""
        return self.measured.sort("step")["measured_ms"].to_numpy()
