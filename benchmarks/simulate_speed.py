"""How fast the timing engine replays a large schedule: DualPipe on 64 ranks with 2048 micro-batches.

Run ``python benchmarks/simulate_speed.py``; prints generation and simulation times and actions
per second (goal: 400k actions simulated in under a second on two cores). Not a test: timings
depend on the machine.
"""

from __future__ import annotations

import argparse
import time

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


if __name__ == "__main__":
    main()
