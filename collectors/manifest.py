"""Merge the ranks' sidecars (``rank{r}.meta.json``) of a capture directory into ``run.json``.

``tracekit record`` calls ``write_manifest`` after the job exits; jobs captured with
``collectors.Capture`` call it themselves once every rank is done (e.g. from the launcher). A rank
is complete only if its sidecar says so and its trace file exists; a rank with no sidecar, or one
still saying ``capturing`` (it died inside the window), is listed as incomplete with the reason.
Standard library only; never reads the traces themselves.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collectors.files import read_json, write_json_atomic

MANIFEST_FORMAT = "tracekit-run/1"
MANIFEST_NAME = "run.json"
SIDECAR = re.compile(r"^rank(\d+)\.meta\.json$")
CAPTURE_FILES = re.compile(r"^(rank\d+(\.partial)?\.json\.gz|rank\d+\.meta\.json|run\.json)$")
"""Every file name a capture writes: what ``tracekit record`` clears from a reused directory."""

_WHY_INCOMPLETE: dict[str, str] = {
    "capturing": "the rank stopped while capturing (it died or was killed); no trace was written",
    "partial": "the job ended inside the capture window; the trace holds fewer steps than requested",
    "failed": "the collector could not write this rank's trace",
}


def _rank_entry(rank: int, meta: dict[str, Any] | None, out_dir: Path) -> dict[str, Any]:
    if meta is None:
        return {
            "rank": rank,
            "complete": False,
            "trace": None,
            "stages": None,
            "host": None,
            "status": "missing",
            "problems": ["no sidecar: the rank never reached the capture window, or died before it"],
        }
    status = meta.get("status")
    trace = meta.get("trace")
    problems = list(meta.get("problems", []))
    complete = status == "complete" and trace is not None and (out_dir / trace).is_file()
    if status in _WHY_INCOMPLETE:
        problems.insert(0, _WHY_INCOMPLETE[status])
    elif not complete:
        problems.insert(0, f"trace file {trace} is missing")
    return {
        "rank": rank,
        "complete": complete,
        "trace": trace if trace is not None and (out_dir / trace).is_file() else None,
        "stages": (meta.get("schedule") or {}).get("stages"),
        "host": meta.get("host"),
        "status": status,
        "problems": problems,
    }


def _agreed(values: list[Any], what: str, problems: list[str]) -> Any:
    distinct = [value for index, value in enumerate(values) if value not in values[:index]]
    if len(distinct) > 1:
        problems.append(f"ranks disagree on {what}: {distinct}")
    return distinct[0] if distinct else None


def build_manifest(
    out_dir: Path,
    *,
    run_id: str | None = None,
    command: Sequence[str] | None = None,
    exit_code: int | None = None,
) -> dict[str, Any]:
    """The run.json payload for ``out_dir``; sidecars of another ``run_id`` (when given) are ignored."""
    problems: list[str] = []
    metas: dict[int, dict[str, Any]] = {}
    for path in sorted(out_dir.iterdir()) if out_dir.is_dir() else []:
        match = SIDECAR.match(path.name)
        if match is None:
            continue
        try:
            meta = read_json(path)
        except (OSError, ValueError) as error:
            problems.append(f"unreadable sidecar {path.name}: {error}")
            continue
        if run_id is not None and meta.get("run_id") != run_id:
            problems.append(f"ignored {path.name}: it belongs to another run")
            continue
        metas[int(match[1])] = meta
    world_size = max([meta.get("world_size", 0) for meta in metas.values()] + [max(metas, default=-1) + 1])
    if not metas:
        problems.append(
            "no rank wrote a sidecar: the job failed before the capture window, or ran fewer steps"
        )
    ranks = [_rank_entry(rank, metas.get(rank), out_dir) for rank in range(world_size)]
    schedules = [meta["schedule"] for meta in metas.values() if meta.get("schedule")]
    schedule_keys = ("class", "name", "pp_size", "num_stages", "microbatches", "paths", "stage_numbering")
    schedule = _agreed(
        [{key: s.get(key) for key in schedule_keys} for s in schedules], "the schedule", problems
    )
    steps = _agreed(
        [meta.get("steps") for meta in metas.values() if meta.get("status") == "complete"], "steps", problems
    )
    requested = _agreed(
        [meta.get("steps", {}).get("requested") for meta in metas.values()], "steps requested", problems
    )
    return {
        "format": MANIFEST_FORMAT,
        "run_id": run_id,
        "complete": bool(ranks) and all(entry["complete"] for entry in ranks),
        "world_size": world_size,
        "schedule": schedule,
        "pp_size": None if schedule is None else schedule["pp_size"],
        "microbatches": None if schedule is None else schedule["microbatches"],
        "rank_to_stages": {
            str(rank): meta["schedule"]["stages"]
            for rank, meta in sorted(metas.items())
            if meta.get("schedule")
        },
        "steps": {
            "requested": requested,
            "captured": None if steps is None else steps["captured"],
            "note": "tracekit:step#n is job step requested[0] + n (steps count step() calls from 0)",
        },
        "torch_version": _agreed(
            [meta.get("torch_version") for meta in metas.values()], "torch version", problems
        ),
        "hosts": sorted({meta["host"] for meta in metas.values() if meta.get("host")}),
        "ranks": ranks,
        "command": list(command) if command is not None else None,
        "exit_code": exit_code,
        "problems": problems,
        "written_unix_ns": time.time_ns(),
    }


def write_manifest(
    out_dir: str | Path,
    *,
    run_id: str | None = None,
    command: Sequence[str] | None = None,
    exit_code: int | None = None,
) -> dict[str, Any]:
    """Merge the sidecars of ``out_dir`` into ``out_dir/run.json`` (atomically); returns the payload."""
    out_dir = Path(out_dir)
    manifest = build_manifest(out_dir, run_id=run_id, command=command, exit_code=exit_code)
    write_json_atomic(out_dir / MANIFEST_NAME, manifest)
    return manifest
