"""Read the collector's per-action probes (``rank{r}.probes.jsonl.gz``) into one typed frame.

The collector (``collectors.probes``) writes, beside each rank's trace, one row per labelled
compute action of the capture window: its wall, on-CPU, run-queue and GC time, plus NVML samples
where a GPU was present. This module reads them for every rank of a run.

``PROBE_SCHEMA``, one row per top-level labelled compute action (nested spans are left out: their
time is inside their parent's):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| step | Int32 | window-relative step (the realized actions' ``step``) | never null |
| stage | Int32 | stage (an overlapped pair: its forward half's) | never null |
| kind | String | F, B, I, W, or F&B for an overlapped pair | never null |
| microbatch | Int32 | micro-batch (a pair: its forward half's) | never null |
| wall_ms | Float64 | wall time of the action's span, ms | never null |
| cpu_ms | Float64 | on-CPU time of the thread running it (``thread_time``), ms | never null |
| runq_ms | Float64 | time the thread was ready but waiting for a core (schedstat), ms | run-queue wait not available |
| dispatches | Int64 | times the thread was put on a core during the span (schedstat) | run-queue wait not available |
| gc_ms | Float64 | Python GC pauses inside the span, ms | never null |
| peer_runq_ms | Float64 | run-queue wait of the process's other Python threads during the span, ms | run-queue wait not available |
| voluntary | Int64 | the thread's voluntary context switches during the span (it slept; ``getrusage``) | not recorded (an older file, or not Linux) |
| involuntary | Int64 | the thread's involuntary context switches during the span (it was preempted) | not recorded |

``WINDOW_SCHEMA``, one row per rank: rank (Int32), runq_ms (Float64) and dispatches (Int64) of the
thread that opened the window, over the whole window (null: run-queue wait not available), and the
window's wall_ms (Float64; null in files written before the collector recorded it, whose window
also ran on through the trace's export).

``NVML_SCHEMA``, one row per GPU sample (taken at action ends, at most one per
``collectors.probes.NVML_INTERVAL_NS``, and at every step's end):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| step | Int32 | window-relative step it was taken in | never null |
| sm_clock_mhz, max_sm_clock_mhz | Float64 | the GPU's SM clock and its maximum, MHz | never null |
| power_w | Float64 | board power draw, W | never null |
| temperature_c | Float64 | GPU temperature, C | never null |
| power_limit_w | Float64 | the enforced power limit, W | the driver did not give it (or an older file) |
| clock_reasons | Int64 | NVML's clock-event (throttle) reason bits | the driver did not give them (or an older file) |

Not for: judging the numbers (``tracekit.stragglers.causes``).
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from tracekit.errors import TracekitError

PROBES_FORMAT = "tracekit-probes/1"
"""The only probes format this reader takes (``collectors.probes.PROBES_FORMAT``)."""

MAX_PROBES_BYTES = 256 * 1024 * 1024
"""Decompressed size above which a probes file is refused (about 4 million actions)."""

PROBE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "microbatch": pl.Int32(),
    "wall_ms": pl.Float64(),
    "cpu_ms": pl.Float64(),
    "runq_ms": pl.Float64(),
    "dispatches": pl.Int64(),
    "gc_ms": pl.Float64(),
    "peer_runq_ms": pl.Float64(),
    "voluntary": pl.Int64(),
    "involuntary": pl.Int64(),
}

WINDOW_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "runq_ms": pl.Float64(),
    "dispatches": pl.Int64(),
    "wall_ms": pl.Float64(),
}

NVML_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),
    "sm_clock_mhz": pl.Float64(),
    "max_sm_clock_mhz": pl.Float64(),
    "power_w": pl.Float64(),
    "temperature_c": pl.Float64(),
    "power_limit_w": pl.Float64(),
    "clock_reasons": pl.Int64(),
}

_COLUMNS = ["step", "stage", "kind", "microbatch", "depth", "wall_ns", "cpu_ns", "runq_ns", "dispatches", "gc_ns",
            "peer_runq_ns", "voluntary", "involuntary"]  # fmt: skip
_COLUMNS_WITHOUT_SWITCHES = _COLUMNS[:-2]
"""The columns of files written before the collector counted context switches: they read as unknown."""


def probes_name(rank: int) -> str:
    """File name of rank ``rank``'s probes (``collectors.probes.probes_name``)."""
    return f"rank{rank}.probes.jsonl.gz"


@dataclass(frozen=True)
class Probes:
    """Every rank's probes: actions, GPU samples, and what the files could not say."""

    actions: pl.DataFrame
    """``PROBE_SCHEMA``."""
    nvml: pl.DataFrame
    """``NVML_SCHEMA``."""
    window: pl.DataFrame
    """``WINDOW_SCHEMA``."""
    ranks: tuple[int, ...]
    """Ranks that have a probes file."""
    notes: tuple[str, ...]
    """Per rank, what its collector could not record (no run-queue wait, no GPU samples)."""


def _read_lines(path: Path) -> list[str]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            text = handle.read(MAX_PROBES_BYTES + 1)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as error:
        raise TracekitError(f"unreadable probes file: {error}", path) from error
    if len(text) > MAX_PROBES_BYTES:
        raise TracekitError(f"probes file decompresses past {MAX_PROBES_BYTES} bytes: refused", path)
    return text.splitlines()


def read_rank_probes(path: Path, rank: int) -> tuple[list[tuple], list[tuple], tuple, list[str]]:
    """(action rows, NVML rows, window row, notes) of one probes file; TracekitError naming the fault."""
    lines = _read_lines(path)
    try:
        header = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError as error:
        raise TracekitError(f"probes header is not JSON: {error}", path) from error
    if not isinstance(header, dict) or header.get("format") != PROBES_FORMAT:
        raise TracekitError(f"not a {PROBES_FORMAT} probes file", path)
    columns = header.get("columns")
    if columns not in (_COLUMNS, _COLUMNS_WITHOUT_SWITCHES) or header.get("rank") != rank:
        raise TracekitError(f"probes header names other columns or another rank than {rank}", path)
    runq = bool(header.get("runq_available"))
    unrecorded = [-1, -1] if columns == _COLUMNS_WITHOUT_SWITCHES else []
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            (step, stage, kind, microbatch, depth, wall, cpu, queued, dispatches, gc_ns, peers,
             slept, preempted) = json.loads(line) + unrecorded  # fmt: skip
            if depth:
                continue
            rows.append(
                (rank, int(step), int(stage), str(kind), int(microbatch), wall / 1e6, cpu / 1e6,
                 queued / 1e6 if runq else None, int(dispatches) if runq else None, gc_ns / 1e6,
                 peers / 1e6 if runq else None, _count(slept), _count(preempted))
            )
        except (json.JSONDecodeError, ValueError, TypeError) as error:
            raise TracekitError(f"line {number}: not a probe row ({error})", path) from error
    if header.get("actions") != len(lines) - 1:
        raise TracekitError(f"header says {header.get('actions')} actions, file holds {len(lines) - 1}", path)
    samples = []
    for sample in header.get("nvml") or []:
        try:
            samples.append(
                (rank, int(sample["step"]), float(sample["sm_clock_mhz"]), float(sample["max_sm_clock_mhz"]),
                 float(sample["power_w"]), float(sample["temperature_c"]),
                 _optional(float, sample.get("power_limit_w")), _optional(int, sample.get("clock_reasons")))
            )
        except (KeyError, TypeError, ValueError) as error:
            raise TracekitError(f"malformed NVML sample {sample!r}", path) from error
    notes = [note for note in header.get("notes") or [] if isinstance(note, str)]
    try:
        wall = _optional(float, header.get("window_wall_ns"))
        window = (rank, float(header["window_runq_ns"]) / 1e6 if runq else None,
                  int(header["window_dispatches"]) if runq else None, None if wall is None else wall / 1e6)  # fmt: skip
    except (KeyError, TypeError, ValueError) as error:
        raise TracekitError("probes header lacks the window's run-queue wait", path) from error
    return rows, samples, window, notes


def _count(value: object) -> int | None:
    """A switch count, None where the collector could not count (-1)."""
    count = int(value)  # type: ignore[call-overload]
    return None if count < 0 else count


def _optional(kind: type, value: object) -> float | int | None:
    """``value`` as ``kind``, None when absent (a field the driver did not give, or an older file)."""
    return None if value is None else kind(value)


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def read_probes(root: Path, ranks: tuple[int, ...]) -> Probes | None:
    """The probes of ``ranks`` found in ``root``; None when no rank has a probes file."""
    rows: list[tuple] = []
    samples: list[tuple] = []
    windows: list[tuple] = []
    said: dict[str, list[int]] = {}
    found = []
    for rank in ranks:
        path = Path(root) / probes_name(rank)
        if not path.is_file():
            continue
        found.append(rank)
        got, nvml, window, notes = read_rank_probes(path, rank)
        rows += got
        samples += nvml
        windows.append(window)
        for note in notes:
            said.setdefault(note, []).append(rank)
    notes = [f"{_ranks(holders)}: {note}" for note, holders in said.items()]
    if not found:
        return None
    missing = sorted(set(ranks) - set(found))
    if missing:
        notes.append(f"{_ranks(missing)}: no probes file: judged on wall time")
    return Probes(
        actions=pl.DataFrame(rows, schema=PROBE_SCHEMA, orient="row"),
        nvml=pl.DataFrame(samples, schema=NVML_SCHEMA, orient="row"),
        window=pl.DataFrame(windows, schema=WINDOW_SCHEMA, orient="row"),
        ranks=tuple(found),
        notes=tuple(notes),
    )
