"""What live mode costs a training step: the example job with and without ``tracekit record --live``.

    python benchmarks/live_overhead.py [--pairs 3] [--steps 40]

Runs the example job (1F1B, 4 CPU ranks, one thread each; layers sized so that every action takes
5 ms or more) in alternating pairs: plain, then under ``tracekit record --live`` (aggregator,
timers, one summary per step, no capture). Each rank times its own steps with perf_counter (this
script wraps the job's trainer; the job itself is unchanged), the first steps are left out as
warm-up, and the figure is the median step time over ranks and steps. The overhead is the median
over pairs of (live - plain) / plain, so a slow moment of the machine hits both halves of a pair.

It also prices the rank-side work alone, free of the machine's noise: the cost of timing one action
and of sending one step summary, measured in a tight loop, times the actions per step, as a share
of the measured step.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples import pipeline_job

STEP_TIMES_ENV = "LIVE_OVERHEAD_STEP_TIMES"
WARMUP_STEPS = 5
JOB = ["--schedule", "1f1b", "--ranks", "4", "--microbatches", "8", "--hidden", "512", "--layers", "2",
       "--microbatch-rows", "256"]  # fmt: skip


def _timed(make_trainer):  # type: ignore[no-untyped-def]
    """Wrap pipeline_job.make_trainer so each rank writes its step durations (ns) to a file."""

    def make(config, rank):  # type: ignore[no-untyped-def]
        train = make_trainer(config, rank)
        durations: list[int] = []

        def timed_train(step: int) -> None:
            started = time.perf_counter_ns()
            train(step)
            durations.append(time.perf_counter_ns() - started)
            if len(durations) == config.steps:
                Path(os.environ[STEP_TIMES_ENV], f"rank{rank}.json").write_text(json.dumps(durations))

        return timed_train

    return make


if os.environ.get(STEP_TIMES_ENV):
    # Also runs in each spawned rank, which imports this file as its main module.
    pipeline_job.make_trainer = _timed(pipeline_job.make_trainer)


def _run(live: bool, steps: int, scratch: Path) -> float:
    """Median step ms of one run of the job (plain or live)."""
    times = Path(tempfile.mkdtemp(dir=scratch))
    job = [sys.executable, __file__, "--child", "--steps", str(steps), *JOB]
    command = job
    if live:
        out = Path(tempfile.mkdtemp(dir=scratch))
        tracekit = [sys.executable, "-m", "tracekit", "record", "--out", str(out), "--live", "--live-interval", "10",
                    "--live-capture-steps", "0", "--format", "json", "--"]  # fmt: skip
        command = tracekit + job
    env = {**os.environ, STEP_TIMES_ENV: str(times), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{'live' if live else 'plain'} run failed:\n{done.stderr[-3000:]}")
    per_rank = [json.loads(path.read_text())[WARMUP_STEPS:] for path in sorted(times.glob("rank*.json"))]
    if len(per_rank) != 4:
        raise SystemExit(f"expected 4 ranks' step times, found {len(per_rank)}")
    return statistics.median(d for durations in per_rank for d in durations) / 1e6


def _action_ms(out_dir: Path) -> float:
    records = [json.loads(line) for line in (out_dir / "live.jsonl").read_text().splitlines()]
    return statistics.median(
        r["action_ms"] for rec in records if rec["type"] == "interval" for r in rec["ranks"]
    )


def _rank_side_us(actions_per_step: int) -> tuple[float, float]:
    """(µs to time one action, µs to end a step and send its summary), measured in a loop."""
    from collectors.live import LiveTimer

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        sink.setblocking(False)
        timer = LiveTimer("%s:%d" % sink.getsockname(), lambda: (0, 4))
        timer.begin_step(0)
        rounds = 20_000
        started = time.perf_counter_ns()
        for _ in range(rounds):
            with timer.action(0, "F", 0):
                pass
        per_action = (time.perf_counter_ns() - started) / rounds / 1e3
        steps = 500
        total = 0
        for step in range(steps):
            timer.begin_step(step)
            for mb in range(actions_per_step):
                with timer.action(0, "F", mb):
                    pass
            started = time.perf_counter_ns()
            timer.end_step(step)
            total += time.perf_counter_ns() - started
            while True:
                try:
                    sink.recv(65536)
                except BlockingIOError:
                    break
    return per_action, total / steps / 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        return pipeline_job.main(["--steps", str(args.steps), *rest])
    with tempfile.TemporaryDirectory() as scratch:
        scratch_dir = Path(scratch)
        pairs = []
        for pair in range(args.pairs):
            plain = _run(False, args.steps, scratch_dir)
            live = _run(True, args.steps, scratch_dir)
            pairs.append((plain, live))
            print(
                f"pair {pair}: plain {plain:.2f} ms/step, live {live:.2f} ms/step ({(live - plain) / plain:+.2%})"
            )
        live_dirs = [p for p in scratch_dir.iterdir() if (p / "live.jsonl").exists()]
        action_ms = _action_ms(live_dirs[0])
    overhead = statistics.median((live - plain) / plain for plain, live in pairs)
    plain_ms = statistics.median(plain for plain, _ in pairs)
    actions_per_step = 2 * 8  # 1F1B: one F and one B per micro-batch on each rank
    per_action_us, per_step_us = _rank_side_us(actions_per_step)
    rank_side = (actions_per_step * per_action_us + per_step_us) / 1e3 / plain_ms
    print(f"median action: {action_ms:.2f} ms; median step (plain): {plain_ms:.1f} ms")
    print(f"measured overhead of live mode (median of {args.pairs} pairs): {overhead:+.2%} of step time")
    print(
        f"rank-side work alone: {per_action_us:.2f} us per action, {per_step_us:.1f} us per step summary "
        f"-> {rank_side:.3%} of step time"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
