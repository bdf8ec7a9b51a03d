"""Constructed 4-rank GPU-timed 1F1B runs of real kernels, one rank slow in a chosen way.

The kernels (names and durations) are DeepSeek's published H800 trace's compute kernels, laid out
per action and timed by the schedule simulator, as in ``tests/analysis/test_gpu_clock.py``. On the
healthy ranks the CPU labels and launches each action in a few microseconds, long before its
kernels run, and the kernels run back to back. The planted rank's actions take ``SLOWDOWN`` times
as long, and how decides why:

- ``kernels``: its kernels are that much longer (its own work: ``compute``);
- ``launch``: its kernels are as long as everyone's, but its CPU launches each one just before it
  runs, so its GPU sits idle between them (``launch-bound``);
- ``clock``: its kernels are longer by the clock ratio ``CLOCK_MHZ / THROTTLED_MHZ``, as at a lower
  SM clock (its NVML samples, written apart by the test, say so: ``throttle``).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import polars as pl

from tracekit.schedule.action import flatten
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.registry import generate

RANKS = 4
MICROBATCHES = 8
STEPS = 3
KERNELS_PER_ACTION = {"F": 6, "B": 12}
STEP_GAP_US = 1_000_000
LAUNCH_US = 3
"""A launch call lasts 2 µs; a healthy rank starts one every 3 µs."""
SLOWDOWN = {"kernels": 3.0, "launch": 3.0, "clock": 1980 / 1380}
CLOCK_MHZ = 1980
THROTTLED_MHZ = 1380


def real_kernels(deepseek_trace: Path) -> list[tuple[str, int]]:
    """Compute kernels of the real trace (name, µs), communication left out."""
    document = orjson.loads(gzip.decompress(deepseek_trace.read_bytes()))
    return [
        (event["name"], int(event["dur"]))
        for event in document["traceEvents"]
        if event.get("cat") == "kernel" and "nccl" not in event["name"].lower() and event.get("dur", 0) > 0
    ]


def _launch(ts: int, correlation: int, dur: int = LAUNCH_US - 1) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
            "dur": dur, "args": {"correlation": correlation}}  # fmt: skip


def _kernel(name: str, ts: int, dur: int, correlation: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": correlation}}  # fmt: skip


def _label(name: str, ts: int, dur: int) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _trace(rank: int, kernels: list[tuple[str, int]], slow_rank: int, how: str) -> dict:
    """One rank's Kineto document."""
    schedule = generate("1f1b", RANKS, MICROBATCHES)
    block = {kind: sum(d for _, d in kernels[:count]) / 1000 for kind, count in KERNELS_PER_ACTION.items()}
    slow = [SLOWDOWN[how] if stage == slow_rank else 1.0 for stage in range(RANKS)]
    costs = Costs(
        forward=tuple(block["F"] * s for s in slow),
        backward_input=tuple(block["B"] * s / 2 for s in slow),
        backward_weight=tuple(block["B"] * s / 2 for s in slow),
        full_backward=tuple(block["B"] * s for s in slow),
    )
    timeline = simulate(schedule, costs).to_frame().filter(pl.col("rank") == rank).sort("start")
    launch_bound = how == "launch" and rank == slow_rank
    events: list[dict] = []
    correlation = rank * 1_000_000
    for step in range(STEPS):
        base = step * STEP_GAP_US
        cpu = base + 10
        events.append(_label(f"tracekit:step#{step}", base, STEP_GAP_US // 2))
        for action, row in zip(flatten(schedule.steps[rank]), timeline.iter_rows(named=True)):
            names = kernels[: KERNELS_PER_ACTION[row["kind"]]]
            start, end = base + 2_000 + row["start"] * 1000, base + 2_000 + row["end"] * 1000
            if launch_bound:
                # Real durations, the rest of the span idle between them; each 1 µs launch returns
                # 1 µs before its kernel starts, so the CPU launches until the action's end. The
                # label ends as its last launch does, before the next action's first launch.
                gap = (end - start - sum(d for _, d in names)) / (len(names) - 1)
                at, first_launch, last_launch = start, round(start) - 2, 0
                for name, dur in names:
                    correlation += 1
                    last_launch = round(at) - 2
                    events.append(_launch(last_launch, correlation, dur=1))
                    events.append(_kernel(name, round(at), dur, correlation))
                    at += dur + gap
                events.append(_label(f"tracekit:{action}", first_launch, last_launch + 1 - first_launch))
                continue
            events.append(_label(f"tracekit:{action}", cpu, len(names) * LAUNCH_US))
            # The action's kernels fill its GPU span in proportion to their real durations, back to back.
            total, done = sum(d for _, d in names), 0
            for name, dur in names:
                correlation += 1
                events.append(_launch(cpu, correlation))
                first = round(start + (end - start) * done / total)
                done += dur
                last = round(start + (end - start) * done / total)
                events.append(_kernel(name, first, last - first, correlation))
                cpu += LAUNCH_US
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": RANKS},
        "host_name": "gpu-node",
        "traceEvents": events,
    }


def write_gpu_run(root: Path, kernels: list[tuple[str, int]], slow_rank: int, how: str) -> Path:
    """Write the 4 ranks' traces of a run with ``slow_rank`` slow as ``how`` says into ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for rank in range(RANKS):
        (root / f"rank{rank}.json").write_bytes(orjson.dumps(_trace(rank, kernels, slow_rank, how)))
    return root
