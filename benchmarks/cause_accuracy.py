"""How often ``tracekit stragglers`` names the planted cause first, over planted stragglers.

For each schedule, each rank R of a 4-rank pipeline and each way of slowing it, the example job is
captured with R slowed by ``--slow-ms`` per forward and per backward of each stage module:
``spin`` (busy-wait: ``compute``), ``sleep`` (``blocked``), ``gc`` (forced full collections:
``gc``) and, with ``--hog``, no delay but R pinned to CPU 0 beside a busy process (at nice -10
where permitted) while the other ranks share CPU 1 (``contended``; needs two CPUs). A case counts as right when R is the first
straggler and the first cause of its row is the planted one. Captures run one at a time.

``--ranks`` picks the straggler ranks: a list (``0,1,2,3``, the default: every rank), or
``rotate``: one rank per (schedule, how), the i-th schedule's j-th how planting rank (i + j) mod 4,
so that over four or more schedules every how is planted on every rank (a quarter of the captures).

Usage: ``python benchmarks/cause_accuracy.py [--schedules 1f1b,dualpipev] [--hows spin,sleep,gc]
[--hog] [--ranks 0,1,2,3|rotate] [--slow-ms 15] [--out DIR] [--reuse]``. Prints one row per case as
it is judged (stderr), then the table, the accuracy per cause and per schedule and cause.
``--hows "" --hog`` captures the busy-process cases alone; ``--reuse`` judges again, with this
tree's analysis, the cases already captured in ``--out`` by the same options.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ sits beside the installed packages, not in them

from examples.small_model import Model
from tracekit.run_analysis import analyse

PLANTED = {"spin": "compute", "sleep": "blocked", "gc": "gc", "hog": "contended"}
"""How the straggler is slowed -> the cause it should be given."""

HOG_S = 300
"""The busy process's own time limit, s (it is also stopped as soon as its capture ends)."""


def _pin_beside(pid: int) -> None:
    """The busy process: on CPU 0, at a higher priority where this user may raise it."""
    os.sched_setaffinity(pid, {0})
    try:
        os.setpriority(os.PRIO_PROCESS, pid, -10)
    except OSError:
        pass  # not permitted: an equal-priority hog still takes half of the core


def capture(out: Path, schedule: str, rank: int, how: str, slow_ms: float, model: Model) -> None:
    """Record one planted case (SystemExit with its stderr when it fails)."""
    job = [sys.executable, "-m", "examples.pipeline_job", "--schedule", schedule, "--ranks", "4",
           "--microbatches", "8", "--steps", "3"]  # fmt: skip
    # The hog case keeps the job's default size: its compute must want the core the hog takes.
    job += [] if how == "hog" else model.args()
    if how == "hog":
        job += ["--cpus", ",".join("0" if other == rank else "1" for other in range(4))]
    else:
        job += ["--slow-rank", str(rank), "--slow-ms", str(slow_ms), "--slow-how", how]
    command = [sys.executable, "-m", "tracekit", "record", "--out", str(out), "--steps", "1:3", "--format", "json",
               "--", *job]  # fmt: skip
    hog = None
    if how == "hog":
        loop = f"import time\nend = time.monotonic() + {HOG_S}\nwhile time.monotonic() < end:\n    pass\n"
        hog = subprocess.Popen([sys.executable, "-c", loop])
        _pin_beside(hog.pid)
    try:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900, check=False)
    finally:
        if hog is not None:
            hog.terminate()
            hog.wait()
    if done.returncode != 0:
        raise SystemExit(f"capture of {out} failed:\n{done.stderr[-2000:]}")


def judge(path: Path, rank: int, how: str) -> tuple[bool, str, str]:
    """(right, first straggler, first cause of the planted rank)."""
    analysis = analyse(path)
    flagged = analysis.stragglers.flagged["rank"].to_list()
    causes = analysis.causes
    mine = causes.filter((causes["rank"] == rank) & (causes["order"] == 1))
    cause = mine["cause"][0] if mine.height else "-"
    first = str(flagged[0]) if flagged else "-"
    return first == str(rank) and cause == PLANTED[how], first, cause


RANKS = 4
"""The pipeline's ranks."""


def planted_ranks(choice: str, schedule_index: int, how_index: int) -> list[int]:
    """The straggler ranks of one (schedule, how): ``choice`` is a comma list or ``rotate`` (module docstring)."""
    if choice == "rotate":
        return [(schedule_index + how_index) % RANKS]
    ranks = [int(rank) for rank in choice.split(",")]
    if not all(0 <= rank < RANKS for rank in ranks):
        raise SystemExit(f"--ranks: ranks are 0 to {RANKS - 1}, got {choice!r}")
    return ranks


def main() -> None:
    """Capture every case and print the table and the accuracy."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", default="1f1b,dualpipev")
    parser.add_argument("--hows", default="spin,sleep,gc")
    parser.add_argument("--hog", action="store_true", help="also plant a busy process beside each rank")
    parser.add_argument("--ranks", default="0,1,2,3", help="straggler ranks, comma-separated, or 'rotate'")
    parser.add_argument("--slow-ms", type=float, default=15.0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/tracekit-cause-accuracy"))
    parser.add_argument("--reuse", action="store_true", help="judge the cases already captured in --out")
    args = parser.parse_args()
    # --hows "" --hog plants the busy process alone
    hows = [how for how in args.hows.split(",") if how] + (["hog"] if args.hog else [])
    model = Model()
    schedules = args.schedules.split(",")
    rows, right = [], {(schedule, how): [0, 0] for schedule in schedules for how in hows}
    for schedule_index, schedule in enumerate(schedules):
        for how_index, how in enumerate(hows):
            for rank in planted_ranks(args.ranks, schedule_index, how_index):
                out = args.out / f"{schedule}-r{rank}-{how}"
                if not args.reuse:
                    capture(out, schedule, rank, how, args.slow_ms, model)
                elif not out.is_dir():
                    raise SystemExit(f"--reuse: {out} was not captured; run once without --reuse")
                ok, first, cause = judge(out, rank, how)
                right[schedule, how][0] += ok
                right[schedule, how][1] += 1
                verdict = "yes" if ok else "no"
                case = f"| {schedule} | rank {rank} | {how} | {PLANTED[how]} |"
                rows.append(f"{case} {first} | {cause} | {verdict} |")
                print(rows[-1], file=sys.stderr, flush=True)
    print("| schedule | straggler | planted | expected cause | first straggler | its first cause | right |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n| schedule | " + " | ".join(f"{how} -> `{PLANTED[how]}`" for how in hows) + " |")
    print("|---|" + "---|" * len(hows))
    for schedule in schedules:
        counts = " | ".join("{} of {}".format(*right[schedule, how]) for how in hows)
        print(f"| {schedule} | {counts} |")
    per_how = {how: [sum(right[schedule, how][i] for schedule in schedules) for i in (0, 1)] for how in hows}
    total = sum(ok for ok, _ in per_how.values()), sum(n for _, n in per_how.values())
    accuracy = "; ".join(f"{how}: {ok} of {n}" for how, (ok, n) in per_how.items())
    print(f"\n{accuracy}; all: {total[0]} of {total[1]}")


if __name__ == "__main__":
    main()
