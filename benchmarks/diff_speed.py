"""What ``tracekit diff BASE NEW`` costs at size, against one ``tracekit stragglers`` of either run.

BASE and NEW are data-parallel copies (``make_large_traces.replicate_pipeline``) of two bundled
captures of one job: ``sample_traces/dualpipev`` and ``sample_traces/dualpipev-straggler`` (the
same 4-rank DualPipeV job with rank 2 slowed), 64 replicas each by default: 256 ranks. Every
command runs in a fresh process, cold (the Parquet caches beside the traces removed: the first
parse) and cached, and is measured in wall time and CPU seconds (user + system of the command and
the worker processes it waited for, from ``wait4``), with the 1-minute load average at its end.
The goal: a diff costs no more than twice one ``stragglers`` of either run. A cold command is
mostly its parse, and two cold parses of equal-sized runs differ by 10-20% on a shared machine, so
``--rounds N`` repeats everything N times and states each round's ratios and their median.

Usage:
    python benchmarks/diff_speed.py                  # 256 ranks
    python benchmarks/diff_speed.py --rounds 3       # 256 ranks, three rounds
    python benchmarks/diff_speed.py --replicas 16    # 64 ranks
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large_traces import replicate_pipeline

from tracekit.trace.run import CACHE_DIR_NAME

REPO = Path(__file__).resolve().parents[1]
BASE, NEW = REPO / "sample_traces" / "dualpipev", REPO / "sample_traces" / "dualpipev-straggler"


@dataclass(frozen=True)
class Measured:
    """One command run."""

    label: str
    phase: str
    round: int
    wall_s: float
    cpu_s: float
    load: float


def measure(label: str, args: list[str], runs: list[Path], phase: str, round_: int) -> Measured:
    """Run ``tracekit ARGS`` in a fresh process (cold: the caches of ``runs`` removed first); it must succeed."""
    if phase == "cold":
        for run in runs:
            shutil.rmtree(run / CACHE_DIR_NAME, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile() as stderr:
        began = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "tracekit", *args], stdout=subprocess.DEVNULL, stderr=stderr,
                                 env=env)  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - began
        stderr.seek(0)
        message = stderr.read().decode(errors="replace").strip()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"tracekit {' '.join(args)} failed ({code}): {message[-400:]}")
    return Measured(label, phase, round_, wall, usage.ru_utime + usage.ru_stime, os.getloadavg()[0])


def main(argv: list[str] | None = None) -> int:
    """Build both runs, time stragglers of each and the diff, cold then cached; print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--replicas", type=int, default=64, help="data-parallel copies of each 4-rank capture"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="where to write the runs (default: a temp dir)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="times to measure every command")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    work = args.work or Path(tempfile.mkdtemp(prefix="tracekit-diff-speed-"))
    base, new = work / "base", work / "new"
    ranks = replicate_pipeline(BASE, base, args.replicas)
    replicate_pipeline(NEW, new, args.replicas)
    commands = [
        ("stragglers BASE", ["stragglers", str(base), "--format", "json"], [base]),
        ("stragglers NEW", ["stragglers", str(new), "--format", "json"], [new]),
        ("diff BASE NEW", ["diff", str(base), str(new), "--format", "json"], [base, new]),
    ]
    results = [
        measure(label, command, runs, phase, round_)
        for round_ in range(1, args.rounds + 1)
        for phase in ("cold", "cached")
        for label, command, runs in commands
    ]
    print(f"{ranks} ranks per run, {os.cpu_count()} cores, runs in {work}")
    print("| round | command | phase | wall s | CPU s | load |")
    print("|---|---|---|---|---|---|")
    for m in results:
        print(f"| {m.round} | {m.label} | {m.phase} | {m.wall_s:.1f} | {m.cpu_s:.1f} | {m.load:.1f} |")
    for phase in ("cold", "cached"):
        for other in ("stragglers BASE", "stragglers NEW"):
            ratios = {"wall": [], "CPU": []}
            for round_ in range(1, args.rounds + 1):
                by = {m.label: m for m in results if m.phase == phase and m.round == round_}
                diff = by["diff BASE NEW"]
                ratios["wall"].append(diff.wall_s / by[other].wall_s)
                ratios["CPU"].append(diff.cpu_s / by[other].cpu_s)
            print(f"{phase}: diff / {other}: " + ", ".join(
                f"{what} {' '.join(f'{r:.2f}x' for r in each)} (median {statistics.median(each):.2f}x)"
                for what, each in ratios.items()
            ))  # fmt: skip
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
