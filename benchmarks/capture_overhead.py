"""What capture costs a training step: median step time without capture, idle and capturing.

Runs the example job's pipeline (spawned gloo ranks on CPU) in two ways, alternately:

- ``off``: no collector at all;
- ``with capture``: schedules patched and a capture window over the middle third of the steps.
  Steps before and after the window are ``idle`` (hooks installed, window closed: the cost every
  step of a captured job pays); steps inside it are ``capturing`` (torch.profiler on, every action
  labelled), once without the profiler's memory events and once with them (``profile_memory``,
  the collector's default: docs/memory.md); and once without memory events nor per-action probes
  (``probes=False``: ``no probes``), so the probes' share of ``capturing`` is measured in the same
  way.

``idle`` and ``capturing`` come from the same run, seconds apart, so their ratio holds even on a
shared machine whose load changes from run to run; ``off`` comes from its own run. Each step is
timed on every rank; a step's wall time is its slowest rank's (the pipeline waits for it). Its CPU
time is the mean over ranks of the process CPU time, which other processes' load barely moves.
Steps 0-2 (set-up), the window's first step (profiler start) and its last (trace export, timed
apart) are left out. Usage: ``python benchmarks/capture_overhead.py [--schedule dualpipev]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/ sits beside the installed packages

import torch.distributed as dist
import torch.multiprocessing as mp

from collectors import Capture, mark
from examples.pipeline_job import JobConfig, init_rank, make_trainer

SETUP_STEPS = 3
"""Steps 0-2: shape inference and communicator set-up."""


def _window(steps: int) -> range:
    return range(steps // 3, 2 * steps // 3)


def _rank(
    rank: int, config: JobConfig, capture: bool, memory: bool, probes: bool, out_dir: str, results: mp.Queue
) -> None:
    init_rank(rank, config.ranks)
    window = _window(config.steps)
    capturing = Capture(out_dir, steps=window, patch=True, profile_memory=memory, probes=probes) if capture else None
    if capturing is not None:
        capturing.__enter__()
    train = make_trainer(config, rank)
    wall_s, cpu_s = [], []
    for step in range(config.steps):
        wall, cpu = time.perf_counter(), time.process_time()
        train(step)
        wall_s.append(time.perf_counter() - wall)
        cpu_s.append(time.process_time() - cpu)
    if capturing is not None:
        capturing.__exit__(None, None, None)
    dist.destroy_process_group()
    results.put((rank, wall_s, cpu_s))


def _spawn(
    config: JobConfig, capture: bool, memory: bool = False, probes: bool = True
) -> tuple[list[float], list[float]]:
    """Per step: slowest rank's wall seconds, mean rank CPU seconds."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    results: mp.Queue = mp.get_context("spawn").Queue()
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_rank, args=(config, capture, memory, probes, out_dir, results), nprocs=config.ranks, join=True)
        per_rank = [results.get() for _ in range(config.ranks)]
    wall = [max(wall_s[step] for _, wall_s, _ in per_rank) for step in range(config.steps)]
    cpu = [statistics.mean(cpu_s[step] for _, _, cpu_s in per_rank) for step in range(config.steps)]
    return wall, cpu


def measure(config: JobConfig) -> dict[str, tuple[float, float]]:
    """Mode -> (median wall ms, median CPU ms) per step, plus ``export`` -> (wall ms of writing, 0)."""
    window = _window(config.steps)
    idle = [s for s in range(SETUP_STEPS, config.steps) if s not in window]
    inside = list(window)[1:-1]
    off_wall, off_cpu = _spawn(config, capture=False)
    wall, cpu = _spawn(config, capture=True)
    memory_wall, memory_cpu = _spawn(config, capture=True, memory=True)
    bare_wall, bare_cpu = _spawn(config, capture=True, probes=False)

    def medians(wall_s: list[float], cpu_s: list[float], steps: list[int]) -> tuple[float, float]:
        return statistics.median(wall_s[s] for s in steps) * 1e3, statistics.median(
            cpu_s[s] for s in steps
        ) * 1e3

    capturing = medians(wall, cpu, inside)
    return {
        "off": medians(off_wall, off_cpu, list(range(SETUP_STEPS, config.steps))),
        "idle": medians(wall, cpu, idle),
        "capturing": capturing,
        "memory idle": medians(memory_wall, memory_cpu, idle),
        "memory": medians(memory_wall, memory_cpu, inside),
        "no probes idle": medians(bare_wall, bare_cpu, idle),
        "no probes": medians(bare_wall, bare_cpu, inside),
        "export": (wall[window.stop - 1] * 1e3 - capturing[0], 0.0),
    }


def idle_label_ns(calls: int = 200_000) -> float:
    """Nanoseconds one ``with mark(...)`` costs while a capture is set up but its window is closed."""
    with (
        tempfile.TemporaryDirectory() as out_dir,
        Capture(out_dir, steps=range(10**9, 10**9 + 1), patch=False),
    ):
        start = time.perf_counter()
        for _ in range(calls):
            with mark(0, "F", 0):
                pass
        return (time.perf_counter() - start) / calls * 1e9


def main() -> None:
    """Print median step times per mode (best of the repeats) and their ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedule", default="dualpipev")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--repeats", type=int, default=2, help="pairs of runs; the best median of each is kept"
    )
    args = parser.parse_args()
    config = JobConfig(args.schedule, args.ranks, args.microbatches, args.steps)
    runs = [measure(config) for _ in range(args.repeats)]
    best = {mode: (min(r[mode][0] for r in runs), min(r[mode][1] for r in runs)) for mode in runs[0]}
    print(f"{args.schedule}, {args.ranks} ranks, {args.microbatches} micro-batches, {os.cpu_count()} CPUs")
    print(f"{'mode':<14} {'median step ms':>15} {'ratio to off':>13} {'CPU ms/rank':>12} {'CPU ratio':>10}")
    for mode in ("off", "idle", "capturing", "memory idle", "memory", "no probes idle", "no probes"):
        wall, cpu = best[mode]
        print(
            f"{mode:<14} {wall:>15.1f} {wall / best['off'][0]:>13.3f} {cpu:>12.1f} {cpu / best['off'][1]:>10.3f}"
        )
    ratios = [r["capturing"][0] / r["idle"][0] for r in runs]
    print(f"capturing / idle, same run (wall): {', '.join(f'{ratio:.3f}' for ratio in ratios)}")
    memory_ratios = [r["memory"][0] / r["memory idle"][0] for r in runs]
    print("capturing with memory / idle, same run (wall): " + ", ".join(f"{r:.3f}" for r in memory_ratios))
    points = ", ".join(f"{100 * (m - c):+.1f}" for m, c in zip(memory_ratios, ratios))
    cpu_points = 100 * (best["memory"][1] - best["capturing"][1]) / best["off"][1]
    print(f"memory recording adds (wall, percentage points of the idle step, per repeat): {points}")
    print(f"memory recording adds (CPU, percentage points of the off step, best of repeats): {cpu_points:+.1f}")
    bare_ratios = [r["no probes"][0] / r["no probes idle"][0] for r in runs]
    points = ", ".join(f"{100 * (c - b):+.1f}" for c, b in zip(ratios, bare_ratios))
    cpu_points = 100 * (best["capturing"][1] - best["no probes"][1]) / best["off"][1]
    print(f"probes add (wall, percentage points of the idle step, per repeat): {points}")
    print(f"probes add (CPU, percentage points of the off step, best of repeats): {cpu_points:+.1f}")
    print(f"trace export + gzip, once per capture (slowest rank): {best['export'][0]:.0f} ms")
    print(f"idle cost of one labelled action (window closed): {idle_label_ns():.0f} ns")


if __name__ == "__main__":
    main()
