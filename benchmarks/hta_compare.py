"""tracekit against Holistic Trace Analysis 0.5.0 on the same traces: time, peak memory, cache.

For each trace directory, in fresh processes (so imports and start-up count, as for a user):
- ``tracekit cold``: ``load_run`` with no cache, then the same figures HTA computes: the
  HTA-compatible breakdown and overlap (``hta_breakdown``);
- ``tracekit cold, all figures``: the same plus tracekit's own GPU breakdown, per-stream activity,
  overlap per communication class and sub-chunk schedule (``analyse_gpu``), work HTA does not do;
- ``tracekit cached``: like-for-like again, with the Parquet cache the cold run left;
- ``HTA``: ``TraceAnalysis(trace_dir)``, ``get_temporal_breakdown`` and ``get_comm_comp_overlap``,
  run by the Python of a separate environment holding HTA (never a tracekit dependency).
Peak memory is the largest sum of resident memory over the process and all its children
(tracekit's and HTA's parsing workers), sampled every 10 ms from /proc. The load-only times
give the cache ratio (first parse / cached load). Each measurement is the median of ``--repeat``.

Set-up and usage (inputs from benchmarks/make_large_traces.py, outside the repository):
    python -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/single --ranks 1 --mb 50
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/eight --ranks 8 --mb 50
    python benchmarks/hta_compare.py /tmp/tracekit-bench/single /tmp/tracekit-bench/eight \\
        --hta-python /tmp/hta-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

TRACEKIT = """
import json, sys, time
start = time.perf_counter()
from pathlib import Path
from tracekit.gpu.analysis import analyse_gpu
from tracekit.gpu.hta_compat import hta_breakdown
from tracekit.trace.run import load_run
loading = time.perf_counter()
run = load_run(Path(sys.argv[1]))
loaded = time.perf_counter()
hta = hta_breakdown(run)
if sys.argv[2] == "all":
    gpu = analyse_gpu(run)
done = time.perf_counter()
print(json.dumps({"load_s": loaded - loading, "total_s": done - start,
                  "idle_pct": hta.frame["idle_pct"].to_list()}))
"""

HTA = """
import json, logging, sys, time
start = time.perf_counter()
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
breakdown = analysis.get_temporal_breakdown(visualize=False)
overlap = analysis.get_comm_comp_overlap(visualize=False)
print(json.dumps({"total_s": time.perf_counter() - start,
                  "idle_pct": breakdown["idle_time_pctg"].tolist()}))
"""


def _tree_rss_kib(root_pid: int) -> int:
    """Resident memory of a process and its descendants, KiB (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        children.setdefault(int(fields["PPid"].strip()), []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def measure(command: list[str]) -> tuple[float, int, dict]:
    """(wall seconds, peak tree RSS in MiB, the JSON the command printed)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while process.poll() is None:
            peak = max(peak, _tree_rss_kib(process.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - started
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"{command[:3]} failed:\n{stderr[-2000:]}")
    return wall, peak // 1024, json.loads(stdout.strip().splitlines()[-1])


def _median(runs: list[tuple[float, int, dict]]) -> tuple[float, int, dict]:
    walls = sorted(runs, key=lambda run: run[0])
    return walls[len(walls) // 2][0], int(statistics.median(run[1] for run in runs)), walls[0][2]


def compare(trace_dir: Path, hta_python: str, repeat: int) -> dict:
    """All measurements of one trace directory."""
    size_mb = sum(p.stat().st_size for p in trace_dir.iterdir() if p.is_file()) / 1e6
    cache = trace_dir / ".tracekit-cache"
    cold_runs, full_runs, cached_runs, hta_runs = [], [], [], []
    for _ in range(repeat):
        shutil.rmtree(cache, ignore_errors=True)
        cold_runs.append(measure([sys.executable, "-c", TRACEKIT, str(trace_dir), "hta"]))
        cached_runs.append(measure([sys.executable, "-c", TRACEKIT, str(trace_dir), "hta"]))
        shutil.rmtree(cache, ignore_errors=True)
        full_runs.append(measure([sys.executable, "-c", TRACEKIT, str(trace_dir), "all"]))
        hta_runs.append(measure([hta_python, "-c", HTA, str(trace_dir)]))
    cold, full, cached, hta = _median(cold_runs), _median(full_runs), _median(cached_runs), _median(hta_runs)
    first_load = statistics.median(run[2]["load_s"] for run in cold_runs)
    cached_load = statistics.median(run[2]["load_s"] for run in cached_runs)
    agree = max(abs(a - b) for a, b in zip(cold[2]["idle_pct"], hta[2]["idle_pct"]))
    return {
        "traces": str(trace_dir),
        "size_mb": round(size_mb, 1),
        "ranks": len(cold[2]["idle_pct"]),
        "hta_wall_s": round(hta[0], 2),
        "tracekit_cold_wall_s": round(cold[0], 2),
        "tracekit_cold_all_figures_wall_s": round(full[0], 2),
        "tracekit_cached_wall_s": round(cached[0], 2),
        "speedup_cold": round(hta[0] / cold[0], 1),
        "speedup_cold_all_figures": round(hta[0] / full[0], 1),
        "speedup_cached": round(hta[0] / cached[0], 1),
        "hta_peak_mib": hta[1],
        "tracekit_cold_peak_mib": cold[1],
        "tracekit_cold_all_figures_peak_mib": full[1],
        "memory_ratio_cold": round(cold[1] / hta[1], 2),
        "memory_ratio_cold_all_figures": round(full[1] / hta[1], 2),
        "first_load_s": round(first_load, 3),
        "cached_load_s": round(cached_load, 4),
        "cache_speedup": round(first_load / cached_load, 1),
        "idle_pct_max_difference": round(agree, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace_dirs", type=Path, nargs="+")
    parser.add_argument(
        "--hta-python", default="/tmp/hta-venv/bin/python", help="Python with HTA 0.5.0 installed"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for trace_dir in args.trace_dirs:
        result = compare(trace_dir, args.hta_python, args.repeat)
        print(json.dumps(result))
        print(
            f"{trace_dir} ({result['size_mb']} MB, {result['ranks']} ranks): "
            f"{result['speedup_cold']}x faster than HTA end to end ({result['tracekit_cold_wall_s']} s vs "
            f"{result['hta_wall_s']} s; {result['speedup_cold_all_figures']}x with all of tracekit's figures, "
            f"{result['speedup_cached']}x from the cache), peak memory "
            f"{result['memory_ratio_cold']} of HTA's ({result['tracekit_cold_peak_mib']} vs {result['hta_peak_mib']} MiB), "
            f"cached load {result['cache_speedup']}x faster than the first parse",
            flush=True,
        )


if __name__ == "__main__":
    main()
