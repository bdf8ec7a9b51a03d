"""How each command's cost grows with the rank count, on data-parallel copies of a real pipeline capture.

For each size, ``benchmarks/make_large_traces.py --replicas`` copies a bundled CPU capture
(default ``sample_traces/1f1b``: 4 gloo ranks, 1F1B, 8 micro-batches, 2 steps) as data-parallel
replicas, with ``pipeline_groups`` in run.json. Then every command runs in a fresh process, twice:
*cold* (the Parquet cache beside the traces removed first: the first parse) and *cached* (the
cache the cold run left). Per command and size it prints wall time, peak RSS (the largest process
of the command's tree, from ``wait4``) and the load average during the run; per command, the
exponent of a least-squares fit of log(time) on log(ranks) (1 is linear), from the smallest size
to 1,024 ranks and over every size; and, at the largest size, stragglers + whatif + dashboard
(cached) against the first parse (report, cold).

The machine may be shared: the load average is printed beside each figure so a reader can tell a
busy run from a slow one.

Usage:
    python benchmarks/scale.py                        # 64 and 256 ranks (minutes on 2 cores)
    python benchmarks/scale.py --full                 # 64, 256, 1,024 and 2,048 ranks
    python benchmarks/scale.py --ranks 64,128 --commands report,whatif
    python benchmarks/scale.py --full --cold report   # the first parse cold, every command cached
    python benchmarks/scale.py --render /tmp/tracekit-scale/1f1b-2048.html   # the page in headless Chromium
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large_traces import DEFAULT_PIPELINE, replicate_pipeline

from tracekit.trace.run import CACHE_DIR_NAME

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ("report", "stragglers", "whatif", "dashboard")
DEFAULT_RANKS = (64, 256)
FULL_RANKS = (64, 256, 1024, 2048)


@dataclass(frozen=True)
class Measured:
    """One command run."""

    command: str
    ranks: int
    phase: str
    """``cold`` (no cache) or ``cached``."""
    wall_s: float
    peak_mib: float
    load: float
    """1-minute load average at the end of the run."""


def _argv(command: str, run: Path) -> list[str]:
    base = [sys.executable, "-m", "tracekit", command, str(run)]
    if command == "dashboard":
        return [*base, "--out", str(run.parent / f"{run.name}.html"), "--format", "json"]
    return [*base, "--format", "json"]


def measure(command: str, run: Path, ranks: int, phase: str) -> Measured:
    """Run ``tracekit command run`` in a fresh process (cold: its cache removed first); it must succeed."""
    if phase == "cold":
        shutil.rmtree(run / CACHE_DIR_NAME, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile() as stderr:
        began = time.perf_counter()
        child = subprocess.Popen(_argv(command, run), stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - began
        stderr.seek(0)
        message = stderr.read().decode(errors="replace").strip()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{command} {run} failed ({code}): {message[-400:]}")
    # ru_maxrss is KiB on Linux: the largest of the child and the descendants it waited for.
    return Measured(command, ranks, phase, wall, usage.ru_maxrss / 1024, os.getloadavg()[0])


def exponent(points: list[tuple[int, float]]) -> float | None:
    """Slope of log(time) on log(ranks) by least squares; None with fewer than two sizes."""
    if len(points) < 2:
        return None
    xs = [math.log(ranks) for ranks, _ in points]
    ys = [math.log(seconds) for _, seconds in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def build(work: Path, source: Path, ranks: int) -> Path:
    """The ``ranks``-rank set under ``work`` (made once, reused while its manifest says the same size)."""
    pipeline = int(orjson.loads((source / "run.json").read_bytes())["world_size"])
    if ranks % pipeline:
        raise SystemExit(f"--ranks {ranks} is not a multiple of the capture's {pipeline} pipeline ranks")
    run = work / f"{source.name}-{ranks}"
    manifest = run / "run.json"
    if not manifest.is_file() or orjson.loads(manifest.read_bytes())["world_size"] != ranks:
        shutil.rmtree(run, ignore_errors=True)
        replicate_pipeline(source, run, ranks // pipeline)
    return run


def _table(results: list[Measured], sizes: list[int], commands: list[str]) -> list[str]:
    lines = [
        "| command | phase | "
        + " | ".join(f"{n} ranks" for n in sizes)
        + " | exponent to 1,024 | exponent, all |"
    ]
    lines.append("|---|---|" + "---|" * len(sizes) + "---|---|")
    for command in commands:
        for phase in ("cold", "cached"):
            rows = {m.ranks: m for m in results if m.command == command and m.phase == phase}
            cells = [
                f"{rows[n].wall_s:.1f} s, {rows[n].peak_mib:.0f} MiB (load {rows[n].load:.1f})"
                if n in rows
                else "-"
                for n in sizes
            ]
            points = [(n, rows[n].wall_s) for n in sizes if n in rows]
            to_1024 = exponent([(n, s) for n, s in points if n <= 1024])
            every = exponent(points)
            fits = [f"{value:.2f}" if value is not None else "-" for value in (to_1024, every)]
            lines.append(f"| {command} | {phase} | " + " | ".join(cells) + f" | {fits[0]} | {fits[1]} |")
    return lines


def render_seconds(page: Path, repeat: int = 3) -> list[float]:
    """Seconds headless Chromium takes from opening ``page`` until every chart has rendered, ``repeat`` times."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = Options()
    options.binary_location = shutil.which("chromium")  # type: ignore[assignment]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,900"):
        options.add_argument(flag)
    done = 'return [...document.querySelectorAll("div.view[data-spec]")].every((e) => e.dataset.rendered === "ok")'
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        seconds = []
        for _ in range(repeat):
            began = time.perf_counter()
            driver.get(page.resolve().as_uri())
            WebDriverWait(driver, 120, poll_frequency=0.05).until(lambda d: d.execute_script(done))
            seconds.append(time.perf_counter() - began)
        return seconds
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/tracekit-scale"), help="where the sets are built"
    )
    parser.add_argument("--source", type=Path, default=DEFAULT_PIPELINE, help="the pipeline capture to copy")
    parser.add_argument("--ranks", default=None, help=f"comma-separated sizes [default: {DEFAULT_RANKS}]")
    parser.add_argument("--full", action="store_true", help=f"every size: {FULL_RANKS}")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated commands to time")
    parser.add_argument(
        "--cold",
        default=",".join(COMMANDS),
        help="commands also timed cold, before their cached run (each cold run parses every trace again)",
    )
    parser.add_argument(
        "--render", type=Path, default=None, help="only time headless Chromium rendering this dashboard page"
    )
    args = parser.parse_args()
    if args.render is not None:
        seconds = render_seconds(args.render)
        size = args.render.stat().st_size / 1e6
        print(
            f"{args.render} ({size:.1f} MB): rendered in "
            + ", ".join(f"{value:.2f} s" for value in seconds)
            + f" (load average {os.getloadavg()[0]:.1f})"
        )
        return
    sizes = list(FULL_RANKS if args.full else DEFAULT_RANKS)
    if args.ranks:
        sizes = [int(value) for value in args.ranks.split(",")]
    commands = [command for command in args.commands.split(",") if command]
    unknown = sorted(set(commands) - set(COMMANDS))
    if unknown:
        raise SystemExit(f"unknown commands {unknown}; known: {', '.join(COMMANDS)}")
    print(f"cores: {os.cpu_count()}, load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    results: list[Measured] = []
    for ranks in sizes:
        began = time.perf_counter()
        run = build(args.work, args.source, ranks)
        print(f"{ranks} ranks: set ready in {time.perf_counter() - began:.1f} s ({run})", flush=True)
        for command in commands:
            for phase in ("cold", "cached") if command in args.cold.split(",") else ("cached",):
                measured = measure(command, run, ranks, phase)
                results.append(measured)
                print(
                    f"  {command:10s} {phase:6s} {measured.wall_s:8.2f} s  {measured.peak_mib:7.0f} MiB  "
                    f"load {measured.load:.1f}",
                    flush=True,
                )
    print()
    print("\n".join(_table(results, sizes, commands)))
    largest = max(sizes)
    at = {(m.command, m.phase): m.wall_s for m in results if m.ranks == largest}
    parse = at.get(("report", "cold"))
    rest = [at.get((command, "cached")) for command in ("stragglers", "whatif", "dashboard")]
    if parse is not None and all(value is not None for value in rest):
        total = sum(rest)  # type: ignore[arg-type]
        print(
            f"\nat {largest} ranks: stragglers + whatif + dashboard (cached) = {total:.1f} s = "
            f"{total / parse:.2f} x the first parse (report, cold: {parse:.1f} s); goal <= 5x"
        )


if __name__ == "__main__":
    main()
