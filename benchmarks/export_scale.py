"""How ``tracekit export --perfetto`` grows with the rank count, on data-parallel copies of a real capture.

Like ``benchmarks/scale.py``, each size is ``make_large_traces.py --replicas`` copies of a bundled
CPU capture (default ``sample_traces/1f1b``: 4 gloo ranks, 8 micro-batches, 2 steps). Per size, a
fresh process first reads the traces (the cold parse, which fills the Parquet cache; not what this
measures), then a second fresh process runs ``tracekit export DIR --perfetto OUT.json.gz`` on the
cached run. It prints, per size: the command's wall and CPU seconds (user + system of the process
tree, from ``wait4``), the part spent building and writing the trace (wall and CPU seconds inside a
third process that analyses, then exports), the file's size, and the load average; then the exponent of a
least-squares fit of log(CPU time) on log(ranks) (1 is linear): on a shared machine CPU
seconds move less with the load than wall time.

Usage:
    python benchmarks/export_scale.py                      # 64, 256, 1,024 and 2,048 ranks
    python benchmarks/export_scale.py --ranks 64,256
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large_traces import DEFAULT_PIPELINE
from scale import build, exponent

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RANKS = (64, 256, 1024, 2048)
_BUILD_ONLY = """
import sys, time
from pathlib import Path
from tracekit.cli.export import _write
from tracekit.present.perfetto import PerfettoOptions, build_export
from tracekit.run_analysis import analyse
analysis = analyse(sys.argv[1])
analysis.marked_actions, analysis.dependencies, analysis.stragglers  # the analysis, not timed below
began, cpu = time.perf_counter(), time.process_time()
export = build_export(analysis, PerfettoOptions())
_write(export, Path(sys.argv[2]))
print(time.perf_counter() - began, time.process_time() - cpu)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the process tree, stdout) of one child process; it must succeed."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=_env())
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {stderr[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime, stdout


def main() -> None:
    """Time the export at each size and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default=",".join(map(str, DEFAULT_RANKS)))
    parser.add_argument("--source", type=Path, default=DEFAULT_PIPELINE)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "tracekit-scale")
    args = parser.parse_args()
    sizes = [int(n) for n in args.ranks.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)
    print(
        "| ranks | command wall s | command CPU s | build + write wall s | build + write CPU s | file MB | load |"
    )
    print("|---|---|---|---|---|---|---|")
    command_points, build_points = [], []
    for ranks in sizes:
        run = build(args.work, args.source, ranks)
        out = args.work / f"{run.name}.json.gz"
        timed([sys.executable, "-m", "tracekit", "report", str(run), "--format", "json"])  # fills the cache
        wall, cpu, _ = timed(
            [sys.executable, "-m", "tracekit", "export", str(run), "--perfetto", str(out), "--format", "json"]
        )
        _, _, seconds = timed([sys.executable, "-c", _BUILD_ONLY, str(run), str(out)])
        build_wall, build_cpu = (float(x) for x in seconds.strip().splitlines()[-1].split())
        command_points.append((ranks, cpu))
        build_points.append((ranks, build_cpu))
        load = os.getloadavg()[0]
        print(
            f"| {ranks:,} | {wall:.1f} | {cpu:.1f} | {build_wall:.2f} | {build_cpu:.2f} | "
            f"{out.stat().st_size / 1e6:.1f} | {load:.1f} |",
            flush=True,
        )
    command_exp, build_exp = exponent(command_points), exponent(build_points)
    if command_exp is not None and build_exp is not None:
        print(
            f"\nexponent of CPU time on ranks: command {command_exp:.2f}, build + write {build_exp:.2f} (1 is linear)"
        )


if __name__ == "__main__":
    main()
