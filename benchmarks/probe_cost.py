"""What one action's probe costs: CPU time of a probed empty span against an unprobed one.

Times ``--spans`` empty action spans with ``collectors.probes``' probe (four clock reads and the
schedstat reads at each end, plus the other Python threads' when there are any) and as many bare
``contextlib.nullcontext`` spans, on this thread's own CPU clock (``time.thread_time_ns``), so the
figure holds on a loaded machine: the difference per span is the probe's cost per action.
``--threads N`` starts N idle Python threads first (each adds one schedstat read per end).
Usage: ``python benchmarks/probe_cost.py [--spans 200000] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.probes import ProbeBuffer


def _cpu_per_span_ns(make, spans: int) -> float:
    start = time.thread_time_ns()
    for microbatch in range(spans):
        with make(microbatch):
            pass
    return (time.thread_time_ns() - start) / spans


def main() -> None:
    """Print the probe's CPU cost per action, median of five rounds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=1, help="idle Python threads beside the main one")
    args = parser.parse_args()
    stop = threading.Event()
    for _ in range(args.threads):
        threading.Thread(target=stop.wait, daemon=True).start()
    buffer = ProbeBuffer()
    idle = contextlib.nullcontext()
    try:
        rounds = []
        for _ in range(5):
            buffer.rows.clear()
            probed = _cpu_per_span_ns(lambda mb: buffer.span(0, 0, "F", mb), args.spans)
            bare = _cpu_per_span_ns(lambda mb: idle, args.spans)
            rounds.append(probed - bare)
    finally:
        buffer.close()
        stop.set()
    print(f"probe: {statistics.median(rounds) / 1000:.2f} us of CPU per action (median of 5 rounds of "
          f"{args.spans} spans, {args.threads} other Python threads; rounds {min(rounds) / 1000:.2f}-"
          f"{max(rounds) / 1000:.2f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
