"""Make large, realistic trace sets for benchmarks by repeating a real trace's steps.

Each output rank is a real source rank's trace (default: the shared ``hta-sampled-2rank``, a real
NCCL job with two ProfilerSteps) with its events repeated back to back until the file reaches the
requested size: every repeat is shifted in time by the source's span plus a 1 ms gap, its
correlation, ``External id`` and flow ids are offset so they stay unique, and its
``ProfilerStep#n`` names are renumbered so steps stay distinct. Output rank r copies source rank
r mod (number of sources) and is re-numbered r in ``distributedInfo``. Nothing is random: the
events are the real ones, only shifted. Files are plain JSON, as torch.profiler writes them.

Usage (writes outside the repository; never commit the output):
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/single --ranks 1 --mb 50
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/eight --ranks 8 --mb 50
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
from pathlib import Path
from typing import Any

import orjson

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DEFAULT_SOURCE = SHARED / "traces" / "hta-sampled-2rank"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_GAP_US = 1000


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _span(events: list[dict[str, Any]]) -> tuple[float, float]:
    starts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    return min(starts), max(ends)


def _max_id(events: list[dict[str, Any]]) -> int:
    ids = [0]
    for event in events:
        args = event.get("args") or {}
        ids += [
            v
            for v in (args.get("correlation"), args.get("External id"), event.get("id"))
            if isinstance(v, int)
        ]
    return max(ids)


def _shifted(event: dict[str, Any], shift_us: float, id_offset: int, step_offset: int) -> dict[str, Any]:
    event = dict(event)
    if isinstance(event.get("ts"), (int, float)):
        event["ts"] = event["ts"] + shift_us
    if isinstance(event.get("id"), int):
        event["id"] += id_offset
    args = event.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int) and args[key] > 0:
                args[key] += id_offset
        event["args"] = args
    match = _STEP.match(str(event.get("name", "")))
    if match:
        event["name"] = f"ProfilerStep#{int(match[1]) + step_offset}"
    return event


def write_rank(source: Path, out: Path, rank: int, world_size: int, target_bytes: int) -> int:
    """Write one repeated rank trace; returns its size in bytes."""
    document = _load(source)
    events = document.pop("traceEvents")
    timed = [e for e in events if e.get("ph") != "M"]
    metadata = [e for e in events if e.get("ph") == "M"]
    start, end = _span(timed)
    steps = len({e["name"] for e in timed if _STEP.match(str(e.get("name", "")))}) or 1
    id_stride = _max_id(events) + 1
    source_bytes = len(orjson.dumps(events))
    repeats = max(1, math.ceil(target_bytes / source_bytes))
    document["distributedInfo"] = {
        **document.get("distributedInfo", {}),
        "rank": rank,
        "world_size": world_size,
    }
    with out.open("wb") as handle:
        # The header as torch.profiler writes it (``"rank": 0``, with a space): HTA finds ranks by that text.
        handle.write(json.dumps(document).encode()[:-1] + b', "traceEvents": [')
        handle.write(b",".join(orjson.dumps(e) for e in metadata))
        for repeat in range(repeats):
            shift = repeat * (end - start + _GAP_US)
            chunk = [_shifted(e, shift, repeat * id_stride, repeat * steps) for e in timed]
            handle.write(b"," + b",".join(orjson.dumps(e) for e in chunk))
        handle.write(b"]}")
    return out.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--mb", type=float, default=50, help="size of each rank's JSON file, MB")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="directory of real rank traces")
    args = parser.parse_args()
    sources = sorted(p for p in args.source.iterdir() if p.name.endswith((".json", ".json.gz")))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    total = 0
    for rank in range(args.ranks):
        size = write_rank(
            sources[rank % len(sources)],
            args.out_dir / f"rank{rank}.json",
            rank,
            args.ranks,
            int(args.mb * 1e6),
        )
        total += size
        print(f"rank {rank}: {size / 1e6:.1f} MB")
    print(f"{args.out_dir}: {args.ranks} ranks, {total / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
