"""Chrome trace event primitives of the Perfetto export: times, metadata events and action lanes.

A thread's complete events must nest, so actions whose spans overlap without nesting (on a GPU
clock, two actions' work at once) are laid on extra lanes of their rank. Not for: which events the
export holds (``tracekit.present.perfetto``).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import polars as pl

ACTIONS_TID, CRITICAL_TID, STRAGGLER_TID = 0, 1, 2
ACTION_LANE_TID, CRITICAL_LANE_TID = 100, 200
"""An action that overlaps one before it on its rank without nesting in it (on a GPU clock, two
actions' work at once) goes on thread ``ACTION_LANE_TID + k``, its k-th extra lane; its
critical-path copy likewise on ``CRITICAL_LANE_TID + k``: a thread's slices must nest."""


def us(ns: float) -> float:
    """ns (relative to the origin) as µs with three decimals, exact to the ns."""
    return round(ns / 1000, 3)


META_ARG = {"process_name": "name", "thread_name": "name", "process_labels": "labels"}


def meta(pid: int, name: str, value: Any, tid: int | None = None) -> dict[str, Any]:
    """A metadata (``M``) event: a process or thread name, sort index or labels."""
    key = "sort_index" if name.endswith("sort_index") else META_ARG[name]
    event: dict[str, Any] = {"ph": "M", "pid": pid, "name": name, "args": {key: value}}
    if tid is not None:
        event["tid"] = tid
    return event


def lanes(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per slice (sorted by start, longest first): the first lane where it follows or nests in what is open."""
    stacks: list[list[int]] = []
    lanes = np.empty(starts.size, dtype=np.int32)
    for index, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                lanes[index] = lane
                break
        else:
            lanes[index] = len(stacks)
            stacks.append([end])
    return lanes


def with_lanes(actions: pl.DataFrame) -> pl.DataFrame:
    """Actions sorted by rank and start (longest first), with the lane of each and of its critical-path copy."""
    ordered = actions.sort("rank", "start_ns", "end_ns", descending=[False, False, True])
    ranks, starts, ends = (ordered[c].to_numpy() for c in ("rank", "start_ns", "end_ns"))
    critical = ordered["critical_position"].is_not_null().to_numpy()
    lane = np.zeros(ordered.height, dtype=np.int32)
    critical_lane = np.zeros(ordered.height, dtype=np.int32)
    bounds = np.flatnonzero(np.diff(ranks, prepend=-1, append=-1))
    for first, last in pairwise(bounds):
        lane[first:last] = lanes(starts[first:last], ends[first:last])
        on_path = np.flatnonzero(critical[first:last]) + first
        critical_lane[on_path] = lanes(starts[on_path], ends[on_path])
    return ordered.with_columns(pl.Series("lane", lane), pl.Series("critical_lane", critical_lane))


def action_tid(lane: int) -> int:
    """The thread of an action on ``lane`` (0: the ``actions`` thread)."""
    return ACTIONS_TID if lane == 0 else ACTION_LANE_TID + lane


def critical_tid(lane: int) -> int:
    """The thread of a critical-path copy on ``lane`` (0: the ``critical path`` thread)."""
    return CRITICAL_TID if lane == 0 else CRITICAL_LANE_TID + lane


def lane_names(rank: int, rows: pl.DataFrame) -> list[dict[str, Any]]:
    """Thread names of a rank's extra lanes, when its actions overlap."""
    names = []
    for lane in range(1, int(rows["lane"].max()) + 1):  # type: ignore[arg-type]
        names.append(meta(rank, "thread_name", f"actions, overlapping ({lane + 1})", action_tid(lane)))
    on_path = rows.filter(pl.col("critical_position").is_not_null())
    top = int(on_path["critical_lane"].max()) if on_path.height else 0  # type: ignore[arg-type]
    for lane in range(1, top + 1):
        names.append(
            meta(rank, "thread_name", f"critical path, overlapping ({lane + 1})", critical_tid(lane))
        )
    return names
