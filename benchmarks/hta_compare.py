"""tracekit against Holistic Trace Analysis 0.5.0 and against the decode floor, on the same traces.

For each trace directory, in fresh processes (imports and start-up count, as for a user), one after
another, each command's CPU seconds (user + system of the process and every worker it waited for,
from ``wait4``), wall seconds, peak memory (the largest resident set of any one of its processes,
from ``wait4``) and the load average around it:
- ``floor``: gunzip (when gzip) and a typed msgspec decode of every event's name, phase, category,
  timestamps (``ts``, ``dur``), pid and tid, in one process: the least a reader of these files in
  Python can do. msgspec is pinned in ``benchmarks/requirements.txt``; the floor checks its version.
- ``tracekit cold``: ``tracekit report --hta-compatible DIR --format json`` with no cache, every
  figure it computes (the whole per-rank parse and reductions, then HTA's breakdown and overlap);
- ``tracekit stored``: the same command again: it prints the result the cold one stored
  (``tracekit.cli.result_store``), without polars or the analysis;
- ``tracekit cached``: the same command with that stored result removed: every figure computed
  again from the parsed events and per-rank reductions the cold one cached;
- ``HTA``: ``TraceAnalysis(trace_dir)``, ``get_temporal_breakdown`` and ``get_comm_comp_overlap``,
  run by the Python of a separate environment holding HTA (never a tracekit dependency).
Both tools' idle percentages are compared rank by rank. Each figure is the median of ``--repeat``.

Set-up and usage (inputs outside the repository; ``--source`` a directory holding one real trace
gives ranks that are copies of that trace, each its own rank):
    python -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0
    pip install -r benchmarks/requirements.txt
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/single --ranks 1 --mb 54
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/eight --ranks 8 --mb 54
    python benchmarks/hta_compare.py /tmp/tracekit-bench/single /tmp/tracekit-bench/eight \\
        --hta-python /tmp/hta-venv/bin/python
Each kind of trace belongs in a run (their event mix differs: docs/performance.md builds sets from
the shared dlrm, DeepSeek and HTA traces).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MSGSPEC_VERSION = "0.23.0"
"""The decoder of the floor, as pinned in benchmarks/requirements.txt."""

FLOOR = """
import gzip, json, sys
import msgspec
if msgspec.__version__ != sys.argv[1]:
    raise SystemExit(f"the floor is defined with msgspec {sys.argv[1]}, found {msgspec.__version__}")

class Event(msgspec.Struct, gc=False):
    name: str = ""
    ph: str = ""
    cat: str = ""
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None

class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event]

decoder = msgspec.json.Decoder(Trace)
events = 0
for path in sys.argv[2:]:
    with open(path, "rb") as handle:
        raw = handle.read()
    text = gzip.decompress(raw) if raw[:2] == b"\\x1f\\x8b" else raw
    events += len(decoder.decode(text).traceEvents)
    del raw, text
print(json.dumps({"events": events}))
"""

HTA = """
import json, logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
breakdown = analysis.get_temporal_breakdown(visualize=False)
overlap = analysis.get_comm_comp_overlap(visualize=False)
print(json.dumps({"idle_pct": breakdown["idle_time_pctg"].tolist()}))
"""


@dataclass(frozen=True)
class Measured:
    """One command's run: CPU and wall seconds, the largest process's peak memory, the load around it."""

    cpu_s: float
    wall_s: float
    peak_mib: int
    load: tuple[float, float]
    """1-minute load average before and after."""
    output: str


def measure(command: list[str]) -> Measured:
    """Run ``command`` to its end; its CPU time and peak memory include every process it waited for."""
    before = os.getloadavg()[0]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout = process.stdout.read()  # type: ignore[union-attr]
    stderr = process.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} failed:\n{stderr.decode()[-2000:]}")
    return Measured(
        cpu_s=usage.ru_utime + usage.ru_stime,
        wall_s=wall,
        peak_mib=usage.ru_maxrss // 1024,  # Linux: KiB, the largest of the process and its children
        load=(before, os.getloadavg()[0]),
        output=stdout.decode(),
    )


def _median(runs: list[Measured]) -> Measured:
    by_cpu = sorted(runs, key=lambda run: run.cpu_s)
    middle = by_cpu[len(by_cpu) // 2]
    return Measured(
        cpu_s=middle.cpu_s,
        wall_s=statistics.median(run.wall_s for run in runs),
        peak_mib=int(statistics.median(run.peak_mib for run in runs)),
        load=(min(run.load[0] for run in runs), max(run.load[1] for run in runs)),
        output=middle.output,
    )


def _trace_files(trace_dir: Path) -> list[Path]:
    return sorted(p for p in trace_dir.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))


def compare(trace_dir: Path, hta_python: str, repeat: int) -> dict:
    """Every measurement of one trace directory, as one JSON-able record."""
    files = _trace_files(trace_dir)
    size_mb = sum(path.stat().st_size for path in files) / 1e6
    cache = trace_dir / ".tracekit-cache"
    tracekit = [sys.executable, "-m", "tracekit", "report", "--hta-compatible", str(trace_dir), "--format", "json"]
    runs: dict[str, list[Measured]] = {"floor": [], "cold": [], "stored": [], "cached": [], "hta": []}
    for _ in range(repeat):
        runs["floor"].append(measure([sys.executable, "-c", FLOOR, MSGSPEC_VERSION, *map(str, files)]))
        shutil.rmtree(cache, ignore_errors=True)
        runs["cold"].append(measure(tracekit))
        runs["stored"].append(measure(tracekit))
        for kept in cache.glob("report.result-*.json"):
            kept.unlink()
        runs["cached"].append(measure(tracekit))
        runs["hta"].append(measure([hta_python, "-c", HTA, str(trace_dir)]))
    shutil.rmtree(cache, ignore_errors=True)
    floor, cold, stored, cached, hta = (
        _median(runs[key]) for key in ("floor", "cold", "stored", "cached", "hta")
    )
    ours = [rank["idle_pct"] for rank in json.loads(cold.output)["ranks"]]
    theirs = json.loads(hta.output.strip().splitlines()[-1])["idle_pct"]
    record: dict[str, object] = {
        "traces": str(trace_dir),
        "files": len(files),
        "size_mb": round(size_mb, 1),
        "ranks": len(ours),
        "decoder": f"msgspec {MSGSPEC_VERSION}",
    }
    measured = (
        ("floor", floor),
        ("tracekit_cold", cold),
        ("tracekit_stored", stored),
        ("tracekit_cached", cached),
        ("hta", hta),
    )
    for key, value in measured:
        record[f"{key}_cpu_s"] = round(value.cpu_s, 2)
        record[f"{key}_wall_s"] = round(value.wall_s, 2)
        record[f"{key}_peak_mib"] = value.peak_mib
        record[f"{key}_load"] = [round(value.load[0], 1), round(value.load[1], 1)]
    record.update(
        cold_over_floor_cpu=round(cold.cpu_s / floor.cpu_s, 2),
        hta_over_cold_cpu=round(hta.cpu_s / cold.cpu_s, 1),
        hta_over_cold_wall=round(hta.wall_s / cold.wall_s, 1),
        hta_over_cached_cpu=round(hta.cpu_s / cached.cpu_s, 1),
        cold_over_hta_peak=round(cold.peak_mib / hta.peak_mib, 2),
        idle_pct_max_difference=round(max(abs(a - b) for a, b in zip(ours, theirs)), 3),
    )
    return record


def _line(record: dict) -> str:
    return (
        f"{record['traces']} ({record['size_mb']} MB, {record['ranks']} ranks), CPU s / wall s / peak MiB:"
        f" floor {record['floor_cpu_s']} / {record['floor_wall_s']} / {record['floor_peak_mib']};"
        f" tracekit cold {record['tracekit_cold_cpu_s']} / {record['tracekit_cold_wall_s']} /"
        f" {record['tracekit_cold_peak_mib']} ({record['cold_over_floor_cpu']}x floor);"
        f" stored {record['tracekit_stored_cpu_s']} / {record['tracekit_stored_wall_s']};"
        f" cached {record['tracekit_cached_cpu_s']} / {record['tracekit_cached_wall_s']};"
        f" HTA {record['hta_cpu_s']} / {record['hta_wall_s']} / {record['hta_peak_mib']}"
        f" ({record['hta_over_cold_cpu']}x tracekit cold in CPU, memory {record['cold_over_hta_peak']}x HTA's);"
        f" load {record['floor_load'][0]}-{record['hta_load'][1]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace_dirs", type=Path, nargs="+")
    parser.add_argument(
        "--hta-python", default="/tmp/hta-venv/bin/python", help="Python with HTA 0.5.0 installed"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    for trace_dir in args.trace_dirs:
        record = compare(trace_dir, args.hta_python, args.repeat)
        print(json.dumps(record))
        print(_line(record), flush=True)


if __name__ == "__main__":
    main()
