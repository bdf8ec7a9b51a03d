"""One Chrome-trace-event file of the whole run on its one aligned clock, for Perfetto and chrome://tracing.

``build_export(analysis, options)`` formats what ``RunAnalysis`` computed, rank by rank (time
linear in ranks), into JSON chunks that ``tracekit export`` writes gzipped:

- process ``rank R`` (pid R), threads:
  - ``actions`` (tid 0; an action overlapping an earlier one without nesting in it, as GPU work of
    two actions can, on an extra lane, ``tracekit.present.perfetto_events``): every realized action as a complete (``X``) event named like the
    collector's label, ``tracekit:{stage}{kind}{micro-batch}`` (so tracekit's own Kineto reader
    reads the actions back; Perfetto colours slices by name without digits, so by kind), category
    ``user_annotation``, its step, stage, kind, micro-batch, critical-path place and ideal duration
    in ``args``;
  - ``critical path`` (tid 1): a copy of each action on its step's critical path,
    ``critical {stage}{kind}{mb} #position``;
  - ``straggler`` (tid 2), on flagged ranks only: one slice over the rank's exported span naming
    the kind, score and price (``saving_ms``, step time saved per step at reference speed);
  - ``GPU d stream s`` (tid ``GPU_TID_BASE + s``): with ``kernels``, the rank's kernels, copies and
    memsets within its exported span, moved by its host's clock offset;
- flow arrows (``s`` on the producer, ``f`` with ``bp: "e"`` on the consumer, one id per
  cross-rank dependency, category ``tracekit.dependency``) from each producer to the action that
  waited for it;
- process ``ideal · rank R`` (pid ``IDEAL_PID_BASE + R``, sorted after every rank): the ideal
  replay of each step (every op at its ideal duration, no gaps) laid from the step's realized start,
  slices ``ideal {stage}{kind}{mb}``.

Times: ``ts`` and ``dur`` in µs (three decimals: ns) from ``baseTimeNanoseconds``, the first
exported action's start rounded down to a µs, as Kineto writes its traces; ``otherData.tracekit``
holds the clock, the host offsets and the steps. Not for: computing any of it (``RunAnalysis``) or
writing the file (``tracekit.cli.export``).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import polars as pl

from tracekit.errors import TracekitError
from tracekit.present.perfetto_events import (
    ACTIONS_TID,
    CRITICAL_TID,
    STRAGGLER_TID,
    action_tid,
    critical_tid,
    lane_names,
    meta,
    us,
    with_lanes,
)
from tracekit.present.perfetto_gpu import (
    gpu_filter,
    gpu_spans,
    kernel_events,
)
from tracekit.present.result import Result, Table
from tracekit.run_analysis import RunAnalysis

IDEAL_PID_BASE = 1_000_000
"""The ideal timeline of rank R is process ``IDEAL_PID_BASE + R``."""
_ACTION_CATEGORY = "user_annotation"
_DEPENDENCY_CATEGORY = "tracekit.dependency"
_FLOW_INSET_NS = 1000
"""A flow end sits this far (at most half the slice) inside its slice, so it binds to that slice alone."""


@dataclass(frozen=True)
class PerfettoOptions:
    """What the exported trace holds."""

    kernels: bool = True
    """Keep the raw GPU kernels, copies and memsets on their streams (when the traces have them)."""
    ideal: bool = True
    """Add the ideal timeline as a second process group."""
    steps: tuple[int, ...] | None = None
    """Steps to export; None: every step."""

    def __post_init__(self) -> None:
        if self.steps is not None and not self.steps:
            raise ValueError("steps, when given, must name at least one step")


@dataclass(frozen=True)
class SizeEstimate:
    """How large the trace will be, before it is written."""

    events: int
    json_bytes: int
    gzip_bytes: int

    def sentence(self) -> str:
        """One line for people: events and megabytes."""
        return f"about {self.events:,} events, {_size(self.json_bytes)} of JSON, {_size(self.gzip_bytes)} gzipped"


def _size(count: int) -> str:
    return f"{count / 1e6:,.1f} MB" if count >= 1e6 else f"{count / 1e3:,.0f} kB"


@dataclass(frozen=True)
class PerfettoExport:
    """The formatted trace: per-rank chunks of events, the kernels still to read, and the header."""

    header: dict[str, Any]
    chunks: tuple[bytes, ...]
    """Comma-joined JSON events (no brackets), one per rank and metadata chunk."""
    kernel_spans: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    """Rank -> (first ns, last ns, clock offset ns) of the span whose GPU work is kept; empty without kernels."""
    kernel_counts: dict[int, int] = field(default_factory=dict)
    analysis: RunAnalysis | None = field(default=None, repr=False)
    warnings: tuple[str, ...] = ()

    def estimate(self) -> SizeEstimate:
        """Events and bytes of the whole file: exact for the formatted part, kernels at the first rank's bytes per event."""
        formatted = sum(len(chunk) for chunk in self.chunks)
        events = sum(chunk.count(b'"ph":') for chunk in self.chunks)
        kernels = sum(self.kernel_counts.values())
        kernel_bytes, sample = 0, b",".join(self.chunks[:64])
        if kernels:
            rank = next(r for r, n in self.kernel_counts.items() if n)
            kernel_sample = self._kernel_chunk(rank)
            kernel_bytes = round(len(kernel_sample) / self.kernel_counts[rank] * kernels)
            sample += kernel_sample
        total = formatted + kernel_bytes + len(orjson.dumps(self.header)) + len(self.chunks) + 32
        ratio = len(gzip.compress(sample, 6)) / max(len(sample), 1)
        return SizeEstimate(events + kernels, total, round(total * ratio))

    def _kernel_chunk(self, rank: int) -> bytes:
        assert self.analysis is not None
        first, last, offset = self.kernel_spans[rank]
        return kernel_events(self.analysis, rank, first, last, offset - self.header["baseTimeNanoseconds"])

    def parts(self) -> Iterator[bytes]:
        """The file's bytes, piece by piece: header, every chunk, then each rank's kernels read one rank at a time."""
        head = orjson.dumps(self.header)
        yield head[:-1] + b',"traceEvents":['
        first = True
        for chunk in self.chunks:
            if chunk:
                yield chunk if first else b"," + chunk
                first = False
        for rank, count in self.kernel_counts.items():
            if count:
                yield (b"" if first else b",") + self._kernel_chunk(rank)
                first = False
        yield b"]}\n"


def _label(stage: int, kind: str, microbatch: int) -> str:
    return f"{stage}{kind}{microbatch}"


def _selected(analysis: RunAnalysis, options: PerfettoOptions) -> pl.DataFrame:
    marked = analysis.marked_actions
    if options.steps is None:
        return marked
    present = set(marked["step"].unique().to_list())
    absent = sorted(set(options.steps) - present)
    if absent:
        raise TracekitError(
            f"no step {', '.join(map(str, absent))} in this run (steps: {', '.join(map(str, sorted(present)))})",
            analysis.source,
        )
    return marked.filter(pl.col("step").is_in(list(options.steps)))


def _flows(analysis: RunAnalysis, actions: pl.DataFrame) -> pl.DataFrame:
    """One row per cross-rank dependency among ``actions``: id, both ends' rank and µs inside their slices."""
    ends = actions.select("rank", "start_ns", "end_ns", "lane").unique(["rank", "end_ns"], keep="first")
    starts = actions.select("rank", "start_ns", "end_ns", "lane").unique(["rank", "start_ns"], keep="first")
    inset = pl.min_horizontal(pl.lit(_FLOW_INSET_NS), (pl.col("end_ns") - pl.col("start_ns")) // 2)
    producers = ends.select(
        pl.col("rank").alias("src_rank"),
        pl.col("end_ns").alias("src_end_ns"),
        (pl.col("end_ns") - inset).alias("src_ns"),
        pl.col("lane").alias("src_lane"),
    )
    consumers = starts.select(
        pl.col("rank").alias("dst_rank"),
        pl.col("start_ns").alias("dst_start_ns"),
        (pl.col("start_ns") + inset).alias("dst_ns"),
        pl.col("lane").alias("dst_lane"),
    )
    steps = actions["step"].unique().implode()
    flows = (
        analysis.dependencies.filter(pl.col("step").is_in(steps))
        .join(producers, on=["src_rank", "src_end_ns"], how="inner")
        .join(consumers, on=["dst_rank", "dst_start_ns"], how="inner")
    )
    assert flows.height == analysis.dependencies.filter(pl.col("step").is_in(steps)).height, (
        "a dependency end is not an action"
    )
    return flows.sort("step", "dst_rank", "dst_ns").with_row_index("id", offset=1)


def _action_events(rows: pl.DataFrame, origin_ns: int, pid: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for row in rows.iter_rows(named=True):
        label = _label(row["stage"], row["kind"], row["microbatch"])
        position = row["critical_position"]
        args = {
            "step": row["step"],
            "stage": row["stage"],
            "kind": row["kind"],
            "microbatch": row["microbatch"],
            "replica": row["replica"],
            "overlapped": row["overlapped"],
            "critical_path": position is not None,
            "critical_position": position,
            "ideal_ms": round((row["ideal_end_ns"] - row["ideal_start_ns"]) / 1e6, 6),
            "label_source": row["source"],
        }
        base = {
            "ts": us(row["start_ns"] - origin_ns),
            "dur": us(row["end_ns"] - row["start_ns"]),
            "pid": pid,
        }
        events.append(
            {
                "ph": "X",
                "cat": _ACTION_CATEGORY,
                "name": f"tracekit:{label}",
                "tid": action_tid(row["lane"]),
                **base,
                "args": args,
            }
        )
        if position is not None:
            events.append(
                {
                    "ph": "X",
                    "cat": "tracekit.critical",
                    "name": f"critical {label} #{position}",
                    "tid": critical_tid(row["critical_lane"]),
                    **base,
                    "args": {"step": row["step"], "critical_position": position},
                }
            )
    return events


def _ideal_events(rows: pl.DataFrame, origin_ns: int, pid: int) -> list[dict[str, Any]]:
    return [
        {
            "ph": "X",
            "cat": "tracekit.ideal",
            "name": f"ideal {_label(row['stage'], row['kind'], row['microbatch'])}",
            "pid": pid,
            "tid": ACTIONS_TID,
            "ts": us(row["ideal_start_ns"] - origin_ns),
            "dur": us(row["ideal_end_ns"] - row["ideal_start_ns"]),
            "args": {
                "step": row["step"],
                "ideal_ms": round((row["ideal_end_ns"] - row["ideal_start_ns"]) / 1e6, 6),
                "realized_ms": round((row["end_ns"] - row["start_ns"]) / 1e6, 6),
            },
        }
        for row in rows.iter_rows(named=True)
    ]


def _flow_events(flows: pl.DataFrame, origin_ns: int) -> dict[int, list[dict[str, Any]]]:
    """Rank -> the flow events that sit on it (starts on producers, ends on consumers)."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    common = {"cat": _DEPENDENCY_CATEGORY, "name": "dependency"}
    for row in flows.iter_rows(named=True):
        by_rank.setdefault(row["src_rank"], []).append(
            {
                "ph": "s",
                "id": row["id"],
                "pid": row["src_rank"],
                "tid": action_tid(row["src_lane"]),
                "ts": us(row["src_ns"] - origin_ns),
                **common,
            }
        )
        by_rank.setdefault(row["dst_rank"], []).append(
            {
                "ph": "f",
                "bp": "e",
                "id": row["id"],
                "pid": row["dst_rank"],
                "tid": action_tid(row["dst_lane"]),
                "ts": us(row["dst_ns"] - origin_ns),
                **common,
                "args": {"step": row["step"], "from_rank": row["src_rank"]},
            }
        )
    return by_rank


def _straggler_events(
    analysis: RunAnalysis, spans: dict[int, tuple[int, int]], origin_ns: int
) -> dict[int, list[dict[str, Any]]]:
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for row in analysis.stragglers.flagged.iter_rows(named=True):
        rank = row["rank"]
        if rank not in spans:
            continue
        first, last = spans[rank]
        text = f"straggler: {row['kind']} score {row['score']:.2f}, saves {row['saving_ms']:.1f} ms per step"
        by_rank[rank] = [
            meta(rank, "thread_name", "straggler", STRAGGLER_TID),
            meta(rank, "process_labels", text),
            {
                "ph": "X",
                "cat": "tracekit.straggler",
                "name": text,
                "pid": rank,
                "tid": STRAGGLER_TID,
                "ts": us(first - origin_ns),
                "dur": us(last - first),
                "args": {
                    k: row[k]
                    for k in (
                        "kind",
                        "kind_score",
                        "score",
                        "reference",
                        "pattern",
                        "saving_ms",
                        "step_ms",
                        "step_ms_without",
                    )
                },
            },
        ]
    return by_rank


_UNLABELLED = (
    "no schedule labels: GPU streams only, each rank on its own clock (clocks are aligned through the "
    "dependencies of labelled actions; capture with `tracekit record` to have them)"
)


def _rank_chunk(rank: int, host: str, events: list[dict[str, Any]]) -> bytes:
    head = [
        meta(rank, "process_name", f"rank {rank}{host}"),
        meta(rank, "process_sort_index", rank),
        meta(rank, "thread_name", "actions", ACTIONS_TID),
        meta(rank, "thread_sort_index", 0, ACTIONS_TID),
        meta(rank, "thread_name", "critical path", CRITICAL_TID),
        meta(rank, "thread_sort_index", 1, CRITICAL_TID),
    ]
    return b",".join(orjson.dumps(event) for event in head + events)


def build_export(analysis: RunAnalysis, options: PerfettoOptions) -> PerfettoExport:
    """The run's trace, formatted rank by rank; TracekitError for a run with neither labels nor GPU work, or a step it lacks."""
    analysis.check_analysable()
    hosts = {
        entry.rank: f" ({entry.host})"
        for entry in (analysis.manifest.ranks if analysis.manifest is not None else ())
    }
    chunks: list[bytes] = []
    ideal_chunks: list[bytes] = []
    warnings: tuple[str, ...] = ()
    if analysis.has_schedule_labels:
        actions = with_lanes(_selected(analysis, options))
        origin = int(actions["start_ns"].min()) // 1000 * 1000  # type: ignore[arg-type]
        alignment = analysis.realized.alignment
        offsets = alignment.rank_offset_ns if alignment is not None else {}
        flows = _flow_events(_flows(analysis, actions), origin)
        ranks = sorted(actions["rank"].unique().to_list())
        spans = {
            rank: (first, last)
            for rank, first, last in actions.group_by("rank")
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
            .iter_rows()
        }
        world = analysis.facts.world_size or (max(ranks) + 1)
        stragglers = _straggler_events(analysis, spans, origin)
        steps = sorted(actions["step"].unique().to_list())
        by_rank = actions.partition_by("rank", maintain_order=True, as_dict=True)  # sorted by _with_lanes
        for (rank,), rows in by_rank.items():
            events = [
                *lane_names(rank, rows),
                *_action_events(rows, origin, rank),
                *flows.get(rank, ()),
                *stragglers.get(rank, ()),
            ]
            chunks.append(_rank_chunk(rank, hosts.get(rank, ""), events))
            if options.ideal:
                pid = IDEAL_PID_BASE + rank
                ideal = [
                    meta(pid, "process_name", f"ideal · rank {rank}"),
                    meta(pid, "process_sort_index", world + rank),
                    meta(pid, "thread_name", "ideal actions", ACTIONS_TID),
                    *_ideal_events(rows, origin, pid),
                ]
                ideal_chunks.append(b",".join(orjson.dumps(event) for event in ideal))
    else:
        if options.steps is not None:
            raise TracekitError("--steps needs schedule labels, and this run has none", analysis.source)
        spans, offsets, steps, warnings = gpu_spans(analysis), {}, [], (_UNLABELLED,)
        ranks = sorted(spans)
        world = analysis.facts.world_size or (max(ranks) + 1)
        origin = min(first for first, _ in spans.values()) // 1000 * 1000
        chunks = [_rank_chunk(rank, hosts.get(rank, ""), []) for rank in ranks]
    kernel_spans: dict[int, tuple[int, int, int]] = {}
    kernel_counts: dict[int, int] = {}
    if options.kernels and analysis.has_gpu:
        for rank in ranks:
            offset = offsets.get(rank, 0)
            first, last = spans[rank]
            kernel_spans[rank] = (first - offset, last - offset, offset)
            kernel_counts[rank] = (
                analysis.run.rank_events(rank)
                .filter(gpu_filter(first - offset, last - offset))
                .select(pl.len())
                .collect()
                .item()
            )
    header = {
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": origin,
        "otherData": {
            "tracekit": {
                "source": str(analysis.source),
                "clock": analysis.clock.value if analysis.has_schedule_labels else "own (unaligned)",
                "host_offsets_ns": {str(rank): offset for rank, offset in sorted(offsets.items())},
                "steps": steps,
                "world_size": world,
                "ranks": len(ranks),
                "ideal": "every op at its ideal duration (tracekit.analysis.ideal), no gaps, from each step's realized start",
            }
        },
    }
    return PerfettoExport(
        header, tuple(chunks + ideal_chunks), kernel_spans, kernel_counts, analysis, warnings
    )


def export_result(export: PerfettoExport, path: str, written_bytes: int) -> Result:
    """What ``tracekit export`` wrote: the file, its events and size against the estimate."""
    estimate = export.estimate()
    tracekit = export.header["otherData"]["tracekit"]
    payload = {
        "perfetto": path,
        "bytes": written_bytes,
        "estimated_bytes": estimate.gzip_bytes if path.endswith(".gz") else estimate.json_bytes,
        "events": estimate.events,
        "ranks": tracekit["ranks"],
        "steps": tracekit["steps"],
        "clock": tracekit["clock"],
        "kernel_events": sum(export.kernel_counts.values()),
    }
    frame = pl.DataFrame([{k: v for k, v in payload.items() if k != "steps"}])
    notes = (
        (
            "open it in ui.perfetto.dev or chrome://tracing; every rank on the one aligned clock, arrows for "
            "cross-rank dependencies, the critical path and stragglers on their own tracks (docs/export.md)"
        ),
    )
    table = Table(f"{path}: trace written", frame, notes, name="export")
    return Result(payload=payload, tables=(table,), warnings=export.warnings)
