"""What only a GPU run shows, checked on a real CUDA capture through ``tracekit record``.

On a machine without CUDA it prints one line and exits 0 (nothing is checked). With a GPU it runs
``benchmarks/gpu_job.py`` (two ranks on two GPUs with NCCL, or one rank holding both stages of a V
schedule on one GPU) and checks:

1. **kernels on CUDA streams**: every rank's trace holds kernels, each on a CUDA stream;
2. **kernels inside each label**: every labelled action launched GPU work inside its label;
3. **GPU clock chosen**: the realized actions are timed on the GPU (``tracekit.analysis.realized``);
4. **comm/compute overlap**: with two ranks or more, NCCL kernels on their own streams and the
   share of them hidden under compute (``tracekit.gpu.overlap``); one rank has none to measure;
5. **capture overhead**: median step time of the profiled steps against the same job uncaptured;
6. **live GPU timers**: under ``record --live`` every rank's step summaries say ``clk: cuda`` (CUDA
   event timers) and carry every action with an end after its start.

It prints a table, writes ``OUT/gpu_check.json`` and exits 1 when a check fails. Figures go to
docs/gpu.md. Usage:

    python benchmarks/gpu_check.py --out /tmp/tracekit-gpu-check
    python benchmarks/gpu_check.py --out /tmp/tracekit-gpu-check --steps 12 --hidden 8192
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from collectors.live_wire import decode
from tracekit.analysis.realized import Clock
from tracekit.run_analysis import RunAnalysis, analyse

SKIP_LINE = "gpu_check: skipped: torch.cuda.is_available() is False on this machine; nothing was checked"
KERNEL_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
PROFILED = "3:5"
"""Steps the capture profiles: after warm-up (allocator, NCCL set-up, cuBLAS heuristics)."""


@dataclass(frozen=True)
class Check:
    """One check's outcome."""

    name: str
    passed: bool | None
    """True, False, or None when it does not apply (said why in ``detail``)."""
    detail: str


@dataclass(frozen=True)
class CheckArgs:
    """The check's command line."""

    out: Path
    steps: int
    hidden: int
    ranks: int | None
    """None: the job's default (2 with two GPUs or more, else 1)."""


def parse_args(argv: Sequence[str] | None = None) -> CheckArgs:
    """The command line; ``--steps`` must leave warm-up steps before the profiled window."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/tracekit-gpu-check"))
    parser.add_argument("--steps", type=int, default=8, help="training steps of each run (>= 6)")
    parser.add_argument("--hidden", type=int, default=4096, help="width of each Linear of the job")
    parser.add_argument(
        "--ranks", type=int, default=None, help="ranks of the job [default: 2 with 2+ GPUs, else 1]"
    )
    args = parser.parse_args(argv)
    if args.steps < 6:
        parser.error("--steps must be >= 6: the capture profiles steps 3-5")
    return CheckArgs(args.out, args.steps, args.hidden, args.ranks)


def trace_checks(analysis: RunAnalysis, expect_comm: bool) -> list[Check]:
    """Checks 1-4 on an analysed capture (any run: a CPU run fails them with its reasons)."""
    kernels = analysis.run.events.filter(pl.col("cat") == "kernel")
    per_rank = kernels.group_by("rank").agg(
        pl.len(),
        pl.col("stream").null_count().alias("no_stream"),
        pl.col("stream").n_unique().alias("streams"),
    )
    missing = sorted(set(analysis.run.ranks) - set(per_rank["rank"].to_list()))
    unstreamed = int(per_rank["no_stream"].sum()) if per_rank.height else 0
    checks = [
        Check(
            "kernels on CUDA streams",
            not missing and unstreamed == 0,
            f"{kernels.height} kernels on {int(per_rank['streams'].sum()) if per_rank.height else 0} (rank, stream) pairs"
            + (f"; ranks without kernels: {missing}" if missing else "")
            + (f"; {unstreamed} kernels without a stream" if unstreamed else ""),
        )
    ]
    projection = analysis.gpu.action_projection if analysis.gpu is not None else None
    if not analysis.has_schedule_labels or projection is None:
        checks.append(
            Check("kernels inside each label", False, "no labelled actions with GPU work in the traces")
        )
    else:
        empty = projection.filter(pl.col("kernels") == 0)
        checks.append(
            Check(
                "kernels inside each label",
                empty.is_empty(),
                f"{projection.height - empty.height} of {projection.height} actions launched GPU work, "
                f"median {projection['kernels'].median():.0f} activities each",
            )
        )
    clock = analysis.clock if analysis.has_schedule_labels else None
    checks.append(
        Check(
            "GPU clock chosen",
            clock is Clock.GPU,
            f"realized actions on the {clock.value if clock else 'no'} clock",
        )
    )
    checks.append(_overlap_check(analysis, expect_comm))
    return checks


def _overlap_check(analysis: RunAnalysis, expect_comm: bool) -> Check:
    name = "comm/compute overlap on real streams"
    if not expect_comm:
        return Check(name, None, "one rank: no communication kernels to overlap")
    overlap = analysis.gpu.overlap if analysis.gpu is not None else pl.DataFrame()
    total = overlap.filter(pl.col("comm_class") == "all") if overlap.height else overlap
    if total.is_empty() or int(total["comm_ns"].sum()) == 0:
        return Check(name, False, "no communication kernels in the traces")
    streams = analysis.gpu.streams if analysis.gpu is not None else pl.DataFrame()
    pct = ", ".join(
        f"rank {r}: {p:.1f}%" for r, p in total.select("rank", "overlap_pct").sort("rank").iter_rows()
    )
    return Check(
        name, True, f"share of communication under compute: {pct}; {streams.height} (rank, stream) rows"
    )


def overhead_check(plain_ms: Sequence[float], captured_ms: Sequence[float]) -> Check:
    """Check 5: median profiled step time against the uncaptured job's, same steps."""
    if not plain_ms or not captured_ms:
        return Check("capture overhead", False, "a run wrote no step times")
    plain, captured = statistics.median(plain_ms), statistics.median(captured_ms)
    overhead = (captured - plain) / plain * 100
    return Check(
        "capture overhead",
        True,
        f"median step {plain:.2f} ms uncaptured, {captured:.2f} ms profiled: {overhead:+.1f}%",
    )


def live_check(messages: Sequence[dict[str, Any]], ranks: int) -> Check:
    """Check 6: every rank's step summaries timed with CUDA events, every action ending after it starts."""
    steps = [m for m in messages if m.get("t") == "step"]
    seen = {m["r"] for m in steps}
    clocks = {m.get("clk") for m in steps}
    bad = [a for m in steps for a in m.get("a", []) if a[4] <= a[3]]
    passed = bool(steps) and seen == set(range(ranks)) and clocks == {"cuda"} and not bad
    return Check(
        "live GPU timers",
        passed,
        f"{len(steps)} step summaries from ranks {sorted(seen)}, clocks {sorted(map(str, clocks))}"
        + (f", {len(bad)} actions ending before they start" if bad else ""),
    )


def _tracekit(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=REPO,
    )


def _job(args: CheckArgs, times: Path) -> list[str]:
    command = [
        sys.executable,
        str(REPO / "benchmarks" / "gpu_job.py"),
        "--steps",
        str(args.steps),
        "--hidden",
        str(args.hidden),
        "--times",
        str(times),
    ]
    return command + (["--ranks", str(args.ranks)] if args.ranks is not None else [])


def _listen_live(
    sock: socket.socket, process: subprocess.Popen[str], deadline: float
) -> list[dict[str, Any]]:
    """The datagrams the ranks send until the job exits (the check stands in for the aggregator)."""
    messages = []
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            data, _ = sock.recvfrom(65536)
        except TimeoutError:
            if process.poll() is not None:
                return messages
            continue
        message = decode(data)
        if message is not None:
            messages.append(message)
    return messages


def live_summaries(command: Sequence[str], out_dir: Path, timeout_s: float = 900) -> list[dict[str, Any]]:
    """The step summaries ``command``'s ranks send under ``tracekit record --live`` (the check listens, no aggregator)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        argv = [
            sys.executable,
            "-m",
            "tracekit",
            "record",
            "--out",
            str(out_dir),
            "--live",
            "--live-address",
            address,
        ]
        live = subprocess.Popen(
            [*argv, "--", *command], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
        )
        try:
            return _listen_live(sock, live, time.monotonic() + timeout_s)
        finally:
            if live.poll() is None:
                live.kill()
            live.wait()


def run_checks(args: CheckArgs) -> list[Check]:
    """Run the job plain, captured and live, and check the three."""
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    ranks = args.ranks if args.ranks is not None else (2 if torch.cuda.device_count() >= 2 else 1)
    plain_times, captured_times = args.out / "plain-times.json", args.out / "captured-times.json"
    plain = subprocess.run(_job(args, plain_times), capture_output=True, text=True, timeout=900, check=False)
    if plain.returncode != 0:
        return [Check("job runs on the GPU", False, plain.stderr.strip()[-400:])]
    capture = args.out / "capture"
    recorded = _tracekit(
        "record", "--out", str(capture), "--steps", PROFILED, "--", *_job(args, captured_times)
    )
    if recorded.returncode != 0:
        return [Check("tracekit record", False, recorded.stderr.strip()[-400:])]
    checks = trace_checks(analyse(capture), expect_comm=ranks >= 2)
    first, last = (int(part) for part in PROFILED.split(":"))
    profiled = json.loads(captured_times.read_text())[first : last + 1]
    checks.append(overhead_check(json.loads(plain_times.read_text())[first : last + 1], profiled))
    messages = live_summaries(_job(args, args.out / "live-times.json"), args.out / "live")
    checks.append(live_check(messages, ranks))
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    """Skip with one line without CUDA; else run every check, print them, and exit 1 on a failure."""
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(SKIP_LINE)
        return 0
    began = time.perf_counter()
    checks = run_checks(args)
    for check in checks:
        mark = {True: "ok  ", False: "FAIL", None: "n/a "}[check.passed]
        print(f"{mark} {check.name}: {check.detail}")
    device = torch.cuda.get_device_name(0)
    summary = {
        "device": device,
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "wall_s": time.perf_counter() - began,
        "checks": [asdict(c) for c in checks],
    }
    (args.out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
    return 1 if any(check.passed is False for check in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
