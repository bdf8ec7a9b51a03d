"""False alarms: clean captures of every sample schedule, each judged by ``tracekit stragglers``.

    python benchmarks/false_alarms.py [--runs 5] [--hidden 128] [--microbatch-rows 16] [--out DIR] [--reuse]

Captures the example job without a straggler (``tracekit record``, 4 ranks, 8 micro-batches, steps
1 and 2 of 3, the model of ``examples/small_model.py``: what ``sample_traces/regenerate.sh`` records)
``--runs`` times per schedule, one capture at a time, and scores each run as ``tracekit stragglers`` does. A clean run should flag
nothing: every flagged rank is a false alarm. Prints one row per schedule: runs, false alarms,
and the lowest rank score seen (1 is typical, the threshold 0.75) with its rank and kind, so how
close a clean run came to an alarm is visible too. ``--reuse`` re-scores the captures in DIR.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ sits beside the installed packages, not in them

import polars as pl
from examples.small_model import Model

from tracekit.run_analysis import analyse

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zbv", "dualpipev", "deepseek-dualpipe")
"""The sample schedules captured by the example job (deepseek-dualpipe: DeepSeek's DualPipe, the
``examples`` extra; left out, and said so, where it is not installed)."""


@dataclass(frozen=True)
class Verdict:
    """One clean capture as ``tracekit stragglers`` judged it."""

    flagged: tuple[int, ...]
    lowest_score: float
    lowest: str
    """``rank R kind K`` of the lowest score."""


def _has_dualpipe() -> bool:
    return importlib.util.find_spec("dualpipe") is not None


def capture(schedule: str, out: Path, model: Model) -> None:
    """Record one clean run of ``schedule`` into ``out``; SystemExit with the job's stderr on failure."""
    job = [sys.executable, "-m", "examples.pipeline_job", "--schedule", schedule, "--ranks", "4",
           "--microbatches", "8", "--steps", "3", *model.args()]  # fmt: skip
    command = [sys.executable, "-m", "tracekit", "record", "--out", str(out), "--steps", "1:3", "--format", "json",
               "--", *job]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"capture of {schedule} into {out} failed ({done.returncode}): {done.stderr[-2000:]}"
        )


def judge(run: Path) -> Verdict:
    """The flagged ranks and the lowest rank score of ``run``."""
    ranks = analyse(run).stragglers.ranks
    lowest = ranks.sort("score").row(0, named=True)
    return Verdict(
        flagged=tuple(ranks.filter(pl.col("flagged"))["rank"].to_list()),
        lowest_score=lowest["score"],
        lowest=f"rank {lowest['rank']} {lowest['kind']}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="clean captures per schedule")
    parser.add_argument(
        "--out", type=Path, default=None, help="where the captures go (default: a temporary directory)"
    )
    parser.add_argument("--reuse", action="store_true", help="score the captures already in --out")
    parser.add_argument("--hidden", type=int, default=Model.hidden, help="the example job's layer width")
    parser.add_argument("--microbatch-rows", type=int, default=Model.microbatch_rows, help="rows per micro-batch")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.reuse and args.out is None:
        parser.error("--reuse needs --out")
    model = Model(args.hidden, args.microbatch_rows)
    root = args.out or Path(tempfile.mkdtemp(prefix="tracekit-false-alarms-"))
    print("| schedule | clean runs | false alarms | lowest rank score (threshold 0.75) |")
    print("|---|---|---|---|")
    alarms, schedules = 0, [name for name in SCHEDULES if name != "deepseek-dualpipe" or _has_dualpipe()]
    if len(schedules) < len(SCHEDULES):
        print("deepseek-dualpipe left out: DualPipe is not installed (pip install -e '.[examples]')", file=sys.stderr)
    for schedule in schedules:
        verdicts = []
        for index in range(args.runs):
            run = root / f"{schedule}-{index}"
            if not args.reuse:
                capture(schedule, run, model)
            verdicts.append(judge(run))
        flagged = sum(len(v.flagged) for v in verdicts)
        alarms += flagged
        lowest = min(verdicts, key=lambda v: v.lowest_score)
        print(
            f"| {schedule} | {args.runs} | {flagged} | {lowest.lowest_score:.3f} ({lowest.lowest}) |",
            flush=True,
        )
    print(f"\n{alarms} false alarms in {args.runs * len(schedules)} clean runs; captures in {root}")


if __name__ == "__main__":
    main()
