"""Make large, realistic trace sets for benchmarks by repeating a real trace's steps.

Each output rank is a real source rank's trace (default: the shared ``hta-sampled-2rank``, a real
NCCL job with two ProfilerSteps) with its events repeated back to back until the file reaches the
requested size: every repeat is shifted in time by the source's span plus a 1 ms gap, its
correlation, ``External id`` and flow ids are offset so they stay unique, and its
``ProfilerStep#n`` names are renumbered so steps stay distinct. Output rank r copies source rank
r mod (number of sources) and is re-numbered r in ``distributedInfo``. Nothing is random: the
events are the real ones, only shifted. Files are plain JSON, as torch.profiler writes them.

With ``--replicas N`` it instead copies a pipeline capture (``tracekit record``'s output, default
the bundled ``sample_traces/1f1b``) as N data-parallel replicas: rank ``replica * P + r`` is
source rank r's trace, sidecar and manifest entry, renumbered, and run.json records the
``pipeline_groups`` (one tuple of P ranks per replica), as a real data-parallel x pipeline capture
does.

Usage (writes outside the repository; never commit the output):
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/single --ranks 1 --mb 50
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/eight --ranks 8 --mb 50
    python benchmarks/make_large_traces.py /tmp/tracekit-bench/dp64 --replicas 16
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
DEFAULT_PIPELINE = Path(__file__).resolve().parents[1] / "sample_traces" / "1f1b"
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


def _renumbered_trace(document: dict[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    info = dict(document.get("distributedInfo") or {})
    info.update(rank=rank, world_size=world_size)
    if isinstance(info.get("pg_config"), list):  # the default group spans the whole job
        info["pg_config"] = [
            {**pg, "pg_size": world_size, "ranks": list(range(world_size))}
            if pg.get("pg_name") == "0"
            else pg
            for pg in info["pg_config"]
        ]
    return {**document, "distributedInfo": info}


def replicate_pipeline(source: Path, out: Path, replicas: int) -> int:
    """Write ``replicas`` data-parallel copies of the pipeline capture in ``source`` into ``out``; returns the ranks."""
    manifest = orjson.loads((source / "run.json").read_bytes())
    pipeline = int(manifest["world_size"])
    world = pipeline * replicas
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for local in range(pipeline):
        document = _load(source / f"rank{local}.json.gz")
        meta = orjson.loads((source / f"rank{local}.meta.json").read_bytes())
        for replica in range(replicas):
            rank = replica * pipeline + local
            name = f"rank{rank}.json.gz"
            (out / name).write_bytes(gzip.compress(orjson.dumps(_renumbered_trace(document, rank, world)), 1))
            (out / f"rank{rank}.meta.json").write_bytes(
                orjson.dumps(
                    {**meta, "rank": rank, "world_size": world, "trace": name}, option=orjson.OPT_INDENT_2
                )
            )
    for replica in range(replicas):
        for entry in manifest["ranks"]:
            rank = replica * pipeline + int(entry["rank"])
            entries.append({**entry, "rank": rank, "trace": f"rank{rank}.json.gz"})
    stages = manifest.get("rank_to_stages") or {}
    replicated = {
        **manifest,
        "world_size": world,
        "ranks": sorted(entries, key=lambda entry: entry["rank"]),
        "rank_to_stages": {
            str(replica * pipeline + int(local)): value
            for replica in range(replicas)
            for local, value in stages.items()
        },
        "pipeline_groups": [list(range(r * pipeline, (r + 1) * pipeline)) for r in range(replicas)],
    }
    (out / "run.json").write_bytes(orjson.dumps(replicated, option=orjson.OPT_INDENT_2))
    return world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--mb", type=float, default=50, help="size of each rank's JSON file, MB")
    parser.add_argument("--source", type=Path, default=None, help="directory of real rank traces")
    parser.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="copy a pipeline capture as this many data-parallel replicas",
    )
    args = parser.parse_args()
    if args.replicas is not None:
        world = replicate_pipeline(args.source or DEFAULT_PIPELINE, args.out_dir, args.replicas)
        print(f"{args.out_dir}: {args.replicas} replicas, {world} ranks")
        return
    source = args.source or DEFAULT_SOURCE
    sources = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
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
