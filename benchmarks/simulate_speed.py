"""How fast the timing engine replays a large schedule: DualPipe on 64 ranks with 2048 micro-batches.

Run ``python benchmarks/simulate_speed.py``; prints generation and simulation times and actions
per second (goal: 400k actions simulated in under a second on two cores), then what writing the
action table costs: the timeline as a frame, its JSON as ``tracekit simulate --format json``
writes it, and the whole command in a fresh process (wall time and peak RSS). ``--microbatches
3072`` gives DualPipe P=64 about 400k actions. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import orjson

from tracekit.present.result import to_json
from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import summarize
from tracekit.schedule.registry import generate


def main() -> None:
    """Time generate, simulate and summarize; print actions per second."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", default="dualpipe")
    parser.add_argument("--pp", type=int, default=64)
    parser.add_argument("--microbatches", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3, help="simulations to time; the best is reported")
    args = parser.parse_args()

    began = time.perf_counter()
    schedule = generate(args.schedule, args.pp, args.microbatches)
    generated = time.perf_counter() - began
    costs = Costs.uniform(schedule.num_stages, 1.0, 1.0, 1.0, comm=0.1)
    actions = schedule.num_actions

    best = float("inf")
    for _ in range(args.repeat):
        began = time.perf_counter()
        timeline = simulate(schedule, costs)
        best = min(best, time.perf_counter() - began)
    began = time.perf_counter()
    summary = summarize(timeline)
    summarized = time.perf_counter() - began

    print(
        f"{args.schedule} pp={args.pp} microbatches={args.microbatches}: {actions:,} actions "
        f"({sum(map(len, schedule.steps)):,} steps)"
    )
    print(f"generate   {generated:6.3f} s")
    print(f"simulate   {best:6.3f} s  -> {actions / best:,.0f} actions/s (best of {args.repeat})")
    print(f"summarize  {summarized:6.3f} s")
    print(f"makespan {summary.makespan:,.1f}, bubble_rate {summary.bubble_rate:.4f}")

    began = time.perf_counter()
    frame = timeline.to_frame()
    framed = time.perf_counter() - began
    began = time.perf_counter()
    payload = to_json(
        summary.to_payload() | {"schedule": orjson.Fragment(frame.drop("overlapped").write_json())}
    )
    serialized = time.perf_counter() - began
    print(f"to_frame   {framed:6.3f} s  ({frame.height:,} rows)")
    print(f"json       {serialized:6.3f} s  ({len(payload) / 1e6:.1f} MB)")
    command = [
        sys.executable,
        "-m",
        "tracekit",
        "simulate",
        "--schedule",
        args.schedule,
        "--pp",
        str(args.pp),
        "--microbatches",
        str(args.microbatches),
        "--format",
        "json",
    ]
    with open(os.devnull, "wb") as sink:
        began = time.perf_counter()
        child = subprocess.Popen(command, stdout=sink)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - began
    assert os.waitstatus_to_exitcode(status) == 0, " ".join(command)
    print(f"command    {wall:6.3f} s  peak RSS {usage.ru_maxrss / 1024:,.0f} MiB  ({' '.join(command[1:])})")


if __name__ == "__main__":
    main()
