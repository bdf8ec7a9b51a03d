"""A captured run: the per-rank trace files of one job, their manifest, and their events in one table.

``load_run`` finds the trace files in a directory, checks they form one run (no rank twice, one
world size, no rank missing without saying so), parses the ranks in parallel worker processes and
caches each rank's event table as Parquet beside the traces (``.tracekit-cache/``, placed by
``tracekit.trace.cache_dir``), reused while the trace file is unchanged. A cached load reads the
cache in this process and starts no worker. ``Run.events`` reads every rank's table on first use;
``Run.rank_events`` scans one rank lazily, which is what analyses that must stay within one rank's
memory use. ``tracekit.perrank`` runs the same steps (``ingest_one`` in a task per rank, with that
rank's reductions beside it, then ``assemble_run``), which is how ``tracekit.analyse`` opens a
directory.

Not for: interpreting the events (``tracekit.analysis``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import orjson
import polars as pl

from collectors.manifest import MANIFEST_NAME, SIDECAR, Manifest, RankMeta, SchemaError, parse_manifest
from tracekit.errors import TracekitError
from tracekit.trace.cache_dir import CACHE_DIR_NAME as CACHE_DIR_NAME
from tracekit.trace.cache_dir import cache_dir_of
from tracekit.trace.kineto import TraceInfo, read_trace
from tracekit.trace.provenance import (
    Cut,
    check_one_capture,
    cut_points,
    cut_warning,
    read_sidecars,
)
from tracekit.trace.schema import EVENT_SCHEMA, EVENT_SCHEMA_VERSION, empty_events, validate_events

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

_TRACE_SUFFIXES = (".json", ".json.gz")
_NOT_TRACES = (MANIFEST_NAME,)


@dataclass(frozen=True)
class Run:
    """The traces of one job: which ranks are here, which are missing, and all their events."""

    root: Path
    tables: tuple[Path, ...]
    """Each present rank's cached event table (Parquet), in rank order, read on demand."""
    traces: tuple[TraceInfo, ...]
    """One per rank present, ordered by rank."""
    world_size: int
    manifest: Manifest | None
    """The collector's run.json (validated); None for traces captured by other tools."""
    missing_ranks: tuple[int, ...]
    warnings: tuple[str, ...] = field(default=())
    cut_ns: tuple[int | None, ...] = field(default=())
    """Per present rank (``traces`` order): events starting at or after this time belong to a step
    that did not finish and are left out of every table; None keeps the whole trace."""
    cut_off: bool = False
    """True when a rank's collector sidecar says its capture stopped early (partial or failed)."""

    @cached_property
    def events(self) -> pl.DataFrame:
        """Every rank's events in one frame (schema of ``tracekit.trace.schema``), read on first use.

        Analyses that go rank by rank use ``rank_events`` instead, so memory stays one rank's worth.
        """
        frames = [
            self._uncut(validate_events(pl.read_parquet(table), str(trace.path)), index)
            for index, (table, trace) in enumerate(zip(self.tables, self.traces))
        ]
        events = pl.concat(frames)
        assert dict(events.schema) == EVENT_SCHEMA
        return events

    def rank_events(self, rank: int) -> pl.LazyFrame:
        """One rank's events as a lazy scan of its cached table: filter and select before collecting."""
        index = self.ranks.index(rank)
        return self._uncut(pl.scan_parquet(self.tables[index]), index)

    def _uncut(self, events: FrameT, index: int) -> FrameT:
        """``events`` of rank ``traces[index]`` without those of a step that did not finish."""
        cut = self.cut_ns[index] if index < len(self.cut_ns) else None
        return events if cut is None else events.filter(pl.col("start_ns") < cut)

    def restricted(self, categories: tuple[str, ...]) -> Run:
        """The same run whose ``events`` hold only these Kineto categories (read rank by rank, filtered).

        For analyses that need a few categories of every rank (the labels) without the whole table.
        """
        view = replace(self)
        frames = [
            self.rank_events(rank).filter(pl.col("cat").is_in(categories)).collect() for rank in self.ranks
        ]
        view.__dict__["events"] = pl.concat(frames) if frames else empty_events()
        return view

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks whose traces are present."""
        return tuple(trace.rank for trace in self.traces)

    @property
    def partial(self) -> bool:
        """True when ranks are missing or a rank's capture was incomplete: figures cover part of the job."""
        incomplete = self.manifest is not None and not self.manifest.complete
        return bool(self.missing_ranks) or incomplete or self.cut_off or any(self.cut_ns)


def trace_files(root: Path) -> list[Path]:
    """The trace files a directory holds (or the file itself); TracekitError when there are none."""
    if not root.exists():
        raise TracekitError("no such file or directory", root)
    if root.is_file():
        return [root]
    files = sorted(
        path
        for path in root.iterdir()
        if path.is_file()
        and path.name.endswith(_TRACE_SUFFIXES)
        and path.name not in _NOT_TRACES
        and SIDECAR.match(path.name) is None
    )
    if not files:
        raise TracekitError("no trace files (*.json or *.json.gz) in this directory", root)
    return files


def read_manifest(root: Path) -> Manifest | None:
    """The run.json beside the traces, or None; TracekitError naming the fault when it is malformed."""
    path = root / MANIFEST_NAME
    if not root.is_dir() or not path.exists():
        return None
    try:
        payload = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as error:
        raise TracekitError(f"unreadable manifest ({error})", path) from None
    try:
        return parse_manifest(payload)
    except SchemaError as error:
        raise TracekitError(f"malformed manifest: {error}", path) from None


def _cache_paths(path: Path, cache_dir: Path) -> tuple[Path, Path]:
    """(event table, trace facts) cache files of ``path``, keyed by its size, mtime and the schema version."""
    stat = path.stat()
    key = f"{path.name}.{stat.st_size}-{stat.st_mtime_ns}-v{EVENT_SCHEMA_VERSION}"
    return cache_dir / f"{key}.parquet", cache_dir / f"{key}.info.json"


def cached_table(path: Path, cache_dir: Path) -> tuple[Path, TraceInfo] | None:
    """The fresh cached table and facts of ``path``, or None when it must be parsed (absent or unreadable facts)."""
    table_path, info_path = _cache_paths(path, cache_dir)
    if not (table_path.exists() and info_path.exists()):
        return None
    try:
        fields = orjson.loads(info_path.read_bytes())
        return table_path, TraceInfo(**{**fields, "path": path, "warnings": tuple(fields["warnings"])})
    except (OSError, ValueError, TypeError, KeyError):  # a damaged facts file is parsed again, never trusted
        return None


def ingest_one(path: Path, cache_dir: Path) -> tuple[Path, TraceInfo]:
    """Parse one trace into a cached Parquet file unless a fresh one exists; runs in a worker process."""
    table, info, _ = parse_one(path, cache_dir)
    return table, info


def parse_one(path: Path, cache_dir: Path) -> tuple[Path, TraceInfo, pl.DataFrame | None]:
    """``ingest_one``, and the event table just parsed (None when the cache was fresh), so the
    caller's first reductions need not read it back."""
    cached = cached_table(path, cache_dir)
    if cached is not None:
        return (*cached, None)
    table_path, info_path = _cache_paths(path, cache_dir)
    frame, info = read_trace(path)
    partial = table_path.with_suffix(f".tmp-{os.getpid()}")
    # Every row group mixes all categories and streams, so min/max statistics would prune nothing
    # for the analyses' filters; lz4 writes and reads faster than zstd (for a cache ~2x larger).
    frame.write_parquet(partial, compression="lz4", statistics=False)
    os.replace(partial, table_path)
    fields = {**info.__dict__, "path": str(path), "warnings": list(info.warnings)}
    info_tmp = info_path.with_suffix(f".tmp-{os.getpid()}")
    info_tmp.write_bytes(orjson.dumps(fields))
    os.replace(info_tmp, info_path)
    return table_path, info, frame


def ingest(
    files: list[Path],
    cache_dir: Path,
    workers: int | None = None,
    on_done: Callable[[Path], None] | None = None,
) -> list[tuple[Path, TraceInfo]]:
    """Parse ``files`` into cached Parquet tables, ranks in parallel; returns (table path, info) per file.

    Fresh cache entries are read here; worker processes start only for the files left to parse, so
    a second load costs no process start-up. Each worker holds one rank's trace at a time: peak
    memory is the largest rank's working set times ``workers``, whatever the number of ranks.
    """
    done: dict[Path, tuple[Path, TraceInfo]] = {}
    for path in files:
        cached = cached_table(path, cache_dir)
        if cached is not None:
            done[path] = cached
            if on_done:
                on_done(path)
    todo = [path for path in files if path not in done]
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    if workers == 1:
        for path in todo:
            done[path] = ingest_one(path, cache_dir)
            if on_done:
                on_done(path)
        return [done[path] for path in files]
    import multiprocessing  # here: one file to parse starts no process
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tracekit.trace.worker_pool import start_worker

    # spawn, not fork: forking a process whose polars thread pool is running can deadlock the child.
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=start_worker,
        initargs=(workers,),
    ) as pool:
        futures = {pool.submit(ingest_one, path, cache_dir): path for path in todo}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            if on_done:
                on_done(futures[future])
    return [done[path] for path in files]


def _check_one_run(infos: list[TraceInfo], manifest: Manifest | None, root: Path) -> int:
    """The run's world size; TracekitError when the files belong to more than one run."""
    by_rank: dict[int, TraceInfo] = {}
    for info in infos:
        if info.rank in by_rank:
            raise TracekitError(
                f"two runs mixed: rank {info.rank} appears in {by_rank[info.rank].path.name} "
                f"and {info.path.name}",
                root,
            )
        by_rank[info.rank] = info
    sizes = {info.world_size for info in infos if info.world_size is not None}
    if manifest is not None:
        sizes.add(manifest.world_size)
    if len(sizes) > 1:
        named = ", ".join(f"{info.path.name}: {info.world_size}" for info in infos if info.world_size)
        raise TracekitError(f"two runs mixed: world sizes differ ({named})", root)
    return sizes.pop() if sizes else max(by_rank) + 1


def load_run(
    root: Path,
    workers: int | None = None,
    on_file: Callable[[Path], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> Run:
    """Load every rank's trace under ``root`` into one event table; TracekitError on bad input.

    ``on_start(n)`` and ``on_file(path)`` let a caller draw progress; they are the only side channel.
    """
    root = Path(root)
    files = trace_files(root)
    manifest = read_manifest(root)
    if on_start:
        on_start(len(files))
    results = ingest(files, cache_dir_of(root), workers, on_file)
    metas = read_sidecars(files)
    for table, info in results:
        check_table(table, info)
    cuts = cut_points(metas, {path: table for path, (table, _) in zip(files, results)})
    return assemble_run(root, files, manifest, results, metas, cuts)


def check_table(table: Path, info: TraceInfo) -> None:
    """TracekitError naming the trace when its cached event table is not in the event schema."""
    validate_events(pl.DataFrame(schema=pl.read_parquet_schema(table)), str(info.path))


def assemble_run(
    root: Path,
    files: list[Path],
    manifest: Manifest | None,
    results: list[tuple[Path, TraceInfo]],
    metas: dict[Path, RankMeta],
    cuts: dict[Path, Cut],
) -> Run:
    """The ``Run`` of ingested ``files`` (``results`` in the same order); TracekitError when they are not one run.

    Reads no event table: ``cuts`` come from the caller (``cut_points``), so the tables may live
    where only the workers that wrote them can read them.
    """
    infos = [info for _, info in results]
    check_one_capture(metas, manifest, root, {info.path: info.run_id for info in infos})
    world_size = _check_one_run(infos, manifest, root)
    order = sorted(range(len(results)), key=lambda index: infos[index].rank)
    present = {info.rank for info in infos}
    missing = tuple(rank for rank in range(world_size) if rank not in present)
    warnings = [warning for info in infos for warning in info.warnings]
    if missing:
        warnings.append(
            f"{root}: partial run: {len(present)} of {world_size} ranks present; missing ranks "
            f"{_ranges(missing)}"
        )
    for entry in manifest.ranks if manifest is not None else ():
        if not entry.complete:
            warnings.append(
                f"{root}: rank {entry.rank} did not complete its capture: "
                f"{'; '.join(entry.problems) or entry.status}"
            )
    cut_off = False
    for path, meta in sorted(metas.items()):
        if meta.status in ("partial", "failed"):
            cut_off = True
            if manifest is None:
                warnings.append(f"{root}: rank {meta.rank} did not complete its capture: {meta.status}")
        if path in cuts:
            warnings.append(cut_warning(cuts[path], meta, root))
    return Run(
        root=root,
        tables=tuple(results[i][0] for i in order),
        traces=tuple(infos[i] for i in order),
        world_size=world_size,
        manifest=manifest,
        missing_ranks=missing,
        warnings=tuple(warnings),
        cut_ns=tuple(cuts[files[i]].start_ns if files[i] in cuts else None for i in order),
        cut_off=cut_off,
    )


def _ranges(numbers: tuple[int, ...]) -> str:
    """``0-3, 7`` style text for sorted integers."""
    spans: list[str] = []
    start = previous = numbers[0]
    for number in numbers[1:] + (None,):  # type: ignore[operator]
        if number is not None and number == previous + 1:
            previous = number
            continue
        spans.append(f"{start}" if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(spans)
