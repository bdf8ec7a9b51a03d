"""Either input to a replay case: an op-table (Parquet + meta YAML) or a captured run directory.

For a run directory: load the traces, take the realized actions, align the hosts' clocks
(``clock``) and build the pipeline dependency model (``pipeline``). For an op-table: read it and
build the Megatron step model (``megatron``); its timestamps are per-step relative and need no
alignment.

Not for: analysis (``attribution``, ``tracekit.stragglers``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
import polars as pl

from collectors.manifest import Manifest
from tracekit.analysis.realized import realized_schedule
from tracekit.trace.run import Run, load_run
from tracekit.whatif.case import ReplayCase
from tracekit.whatif.clock import ClockAlignment, apply_offsets, estimate_offsets
from tracekit.whatif.megatron import megatron_case
from tracekit.whatif.optable import find_meta, read_meta, read_optable
from tracekit.whatif.pipeline import pipeline_case


@dataclass(frozen=True)
class LoadedCase:
    """A replay case with what was learnt on the way in."""

    case: ReplayCase
    warnings: tuple[str, ...]
    actions: pl.DataFrame | None
    """Kineto runs: the realized actions on the aligned clock; None for an op-table."""
    clock: ClockAlignment | None
    """Kineto runs: the clock offsets applied; None for an op-table."""
    manifest: Manifest | None
    """Kineto runs: the run manifest, when the capture wrote one."""


def is_optable(path: Path) -> bool:
    """True when ``path`` names an op-table file rather than a run directory."""
    return path.suffix == ".parquet"


def _hosts(run: Run) -> dict[int, str] | None:
    """Rank -> host from the manifest, else from the traces; None unless every rank's host is known."""
    from_manifest = {
        entry.rank: entry.host
        for entry in (run.manifest.ranks if run.manifest is not None else ())
        if entry.host is not None
    }
    if set(run.ranks) <= set(from_manifest):
        return from_manifest
    from_traces = {trace.rank: trace.host_name for trace in run.traces if trace.host_name}
    return from_traces if set(run.ranks) <= set(from_traces) else None  # type: ignore[return-value]


def load_case(path: Path, meta: Path | None = None, load: Callable[[Path], Run] = load_run) -> LoadedCase:
    """The replay case of ``path``; TracekitError on bad input."""
    path = Path(path)
    if is_optable(path):
        job = read_meta(meta if meta is not None else find_meta(path))
        case = megatron_case(read_optable(path), job, str(path))
        return LoadedCase(case=case, warnings=(), actions=None, clock=None, manifest=None)
    run = load(path)
    realized = realized_schedule(run)
    warnings = list(run.warnings) + list(realized.warnings)
    clock = estimate_offsets(realized.actions, _hosts(run))
    if clock.violations:
        warnings.append(
            f"{path}: {clock.violations} of {clock.dependencies} cross-rank dependencies still run backwards after "
            f"clock alignment (worst {clock.worst_violation_ns / 1e6:.3f} ms): one offset per host cannot satisfy them"
        )
    if clock.unresolved_hosts:
        warnings.append(
            f"{path}: hosts {list(clock.unresolved_hosts)} exchange with the others only one way: their clocks "
            "were left unaligned"
        )
    actions = apply_offsets(realized.actions, clock.rank_offset_ns)
    case, replay_warnings = pipeline_case(actions, str(path))
    return LoadedCase(
        case=case,
        warnings=tuple(warnings) + replay_warnings,
        actions=actions,
        clock=clock,
        manifest=run.manifest,
    )
