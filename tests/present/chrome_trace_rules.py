"""The structural rules of the Chrome trace event format that Perfetto's JSON importer relies on.

Perfetto's ``trace_processor`` would be the natural judge, but the ``perfetto`` Python package
downloads its binary at run time and no registry ships it, so the tests check the format's rules
directly (docs/export.md, "How the export is checked"):

- every event has ``ph``, ``pid`` and ``name``; complete events (``X``) have a ``tid``, ``ts`` and a
  ``dur`` >= 0;
- on each thread (pid, tid) the complete events nest: each one lies inside the one around it or
  starts after it ends (the format draws slices as a stack; a partial overlap is misdrawn);
- flows: each id has exactly one start (``s``) and one end (``f``); each lies inside a complete
  event of its own thread (the slice it binds to: the enclosing one, ``bp: "e"`` for the end), and
  the end is not before the start;
- metadata: every process with events has a ``process_name``, every thread with complete events a
  ``thread_name``.

``violations(events)`` returns one sentence per broken rule (empty: the trace is well formed).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

_TOLERANCE_US = 0.0015
"""Times are written in µs with three decimals: ends may differ by a rounding of the ns."""


def _nesting(slices: list[tuple[float, float, str]], where: str) -> list[str]:
    problems = []
    stack: list[tuple[float, float, str]] = []
    for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
        while stack and start >= stack[-1][1] - _TOLERANCE_US:
            stack.pop()
        if stack and end > stack[-1][1] + _TOLERANCE_US:
            problems.append(
                f"{where}: {name!r} [{start}, {end}] overlaps {stack[-1][2]!r} without nesting in it"
            )
        stack.append((start, end, name))
    return problems


def _enclosing(slices: list[tuple[float, float, str]], starts: list[float], ts: float) -> bool:
    """True when some slice of the (start-sorted) thread contains ``ts``."""
    index = bisect.bisect_right(starts, ts)
    return any(start <= ts < end for start, end, _ in slices[:index])


def violations(events: list[dict[str, Any]]) -> list[str]:
    """Every broken rule of the format in ``events``, one sentence each."""
    problems: list[str] = []
    threads: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    process_names, thread_names, pids = set(), set(), set()
    flows: dict[Any, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {"s": [], "f": []})
    for event in events:
        if not {"ph", "pid", "name"} <= event.keys():
            problems.append(f"event without ph, pid or name: {event}")
            continue
        phase = event["ph"]
        if phase == "M":
            if event["name"] == "process_name":
                process_names.add(event["pid"])
            elif event["name"] == "thread_name":
                thread_names.add((event["pid"], event.get("tid")))
            continue
        pids.add(event["pid"])
        if phase == "X":
            if "tid" not in event or "ts" not in event or event.get("dur", -1) < 0:
                problems.append(f"complete event without tid, ts or a dur >= 0: {event}")
                continue
            threads[(event["pid"], event["tid"])].append(
                (event["ts"], event["ts"] + event["dur"], event["name"])
            )
        elif phase in ("s", "f"):
            flows[event.get("id")][phase].append(event)
        else:
            problems.append(f"unexpected phase {phase!r}: {event}")
    for (pid, tid), slices in threads.items():
        problems.extend(_nesting(slices, f"pid {pid} tid {tid}"))
        if (pid, tid) not in thread_names:
            problems.append(f"pid {pid} tid {tid} has slices but no thread_name")
    problems.extend(f"pid {pid} has events but no process_name" for pid in sorted(pids - process_names))
    ordered = {key: sorted(slices) for key, slices in threads.items()}
    starts = {key: [s[0] for s in slices] for key, slices in ordered.items()}
    for flow_id, ends in flows.items():
        if len(ends["s"]) != 1 or len(ends["f"]) != 1:
            problems.append(
                f"flow {flow_id}: {len(ends['s'])} starts and {len(ends['f'])} ends, not one of each"
            )
            continue
        (start,), (end,) = ends["s"], ends["f"]
        if end.get("bp") != "e":
            problems.append(f"flow {flow_id}: its end does not bind to its enclosing slice (bp 'e')")
        if end["ts"] < start["ts"]:
            problems.append(f"flow {flow_id}: ends at {end['ts']} before it starts at {start['ts']}")
        for name, point in (("start", start), ("end", end)):
            key = (point["pid"], point.get("tid"))
            if key not in ordered or not _enclosing(ordered[key], starts[key], point["ts"]):
                problems.append(
                    f"flow {flow_id}: its {name} at {point['ts']} lies in no slice of pid {key[0]} tid {key[1]}"
                )
    return problems
