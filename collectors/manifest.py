"""The capture's file contract: names, the per-rank sidecar and the run manifest (``run.json``), typed.

One schema, written by the collectors and read by the analysis (``tracekit.trace.run``): every field
of ``rank{r}.meta.json`` (``RankMeta``) and of ``run.json`` (``Manifest``) is declared here once, as a
frozen dataclass, and ``parse_manifest`` / ``parse_rank_meta`` check a file against it (one
``SchemaError`` line naming the field at fault). To add a field: declare it with a default (files
written before it existed still read), fill it where the sidecars are merged (``collectors.merge``)
or written (``collectors.capture``), and document it in its docstring. A change that old readers
cannot ignore bumps the format's version.

Not for merging sidecars (``collectors.merge``) nor for writing them (``collectors.capture``).
Standard library only: imported inside training jobs and by the torch-free analysis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from collectors.typed_json import SchemaError, from_json, to_json

MANIFEST_NAME = "run.json"
"""The run manifest's file name, beside the rank traces."""
MANIFEST_FORMAT = "tracekit-run/1"
"""``format`` of run.json; readers accept this version only."""
SIDECAR_FORMAT = "tracekit-rank-meta/1"
"""``format`` of a rank's sidecar."""
SIDECAR = re.compile(r"^rank(\d+)\.meta\.json$")
"""A rank's sidecar file name; group 1 is the rank."""
RUN_ID_METADATA = "tracekit_run_id"
"""Key of the run id in each trace's top-level metadata (beside ``distributedInfo``)."""
INCOMING_PREFIX = ".tracekit-incoming-"
"""Name prefix of the directory a capture is written into before it joins (or replaces) DIR's."""
TRACE_FILE = re.compile(r"^rank(\d+)(\.partial)?\.json\.gz$")
"""A rank's trace file name; group 1 is the rank."""
CAPTURE_FILES = re.compile(
    r"^(rank\d+(\.partial)?\.json\.gz|rank\d+\.meta\.json|rank\d+\.probes\.jsonl\.gz|run\.json)$"
)
"""Every file name a capture writes: what ``tracekit record`` clears from a reused directory."""

RankStatus = Literal["capturing", "complete", "partial", "failed", "not-reached"]
"""A sidecar's status: inside the window, done, the job ended inside the window, the write failed,
or the job ended before the window (a recognized schedule ran, but fewer steps than its first)."""
EntryStatus = Literal["capturing", "complete", "partial", "failed", "not-reached", "missing"]
"""A rank's status in run.json: its sidecar's, or ``missing`` when it wrote none."""


def sidecar_name(rank: int) -> str:
    """File name of rank ``rank``'s sidecar."""
    return f"rank{rank}.meta.json"


def trace_name(rank: int, complete: bool) -> str:
    """File name of rank ``rank``'s trace: ``rank{r}.json.gz``, or ``rank{r}.partial.json.gz``."""
    return f"rank{rank}.json.gz" if complete else f"rank{rank}.partial.json.gz"


@dataclass(frozen=True)
class MicrobatchPath:
    """Micro-batches ``[first_microbatch, stop_microbatch)`` enter at ``first_stage`` and leave after ``last_stage``."""

    first_microbatch: int
    stop_microbatch: int
    first_stage: int
    last_stage: int


@dataclass(frozen=True)
class StageWork:
    """What one stage module holds, counted once when the capture window opens (``collectors.work``).

    Analysis compares stages without peers by it (``tracekit.analysis.work``).
    """

    stage: int
    """Global stage index."""
    params: int
    """Parameters of the stage module (shared ones once)."""
    embedding_params: int
    """Of those, parameters held by embedding tables (``nn.Embedding``/``nn.EmbeddingBag``)."""
    layers: int
    """Length of the stage's longest ``ModuleList``/``ModuleDict`` (its repeated blocks), else its
    leaf modules that hold parameters."""


@dataclass(frozen=True)
class RunSchedule:
    """The pipeline schedule every rank of a run agrees on."""

    class_name: str = field(metadata={"json": "class"})
    """The schedule's class, e.g. ``ScheduleDualPipeV``."""
    name: str
    """Normalized name, e.g. ``dualpipev``: the simulator's names (``tracekit.schedule.registry``) where it knows one."""
    pp_size: int
    """Pipeline ranks."""
    num_stages: int
    """Global stages (stage indices run 0..num_stages-1)."""
    microbatches: int
    """Micro-batches per step."""
    paths: tuple[MicrobatchPath, ...]
    """Which micro-batches flow through which stages (DualPipe has two directions)."""
    stage_numbering: str = "torch.distributed.pipelining stage_index"
    """How stage indices were assigned."""


@dataclass(frozen=True)
class ScheduleInfo:
    """What one rank knows about the pipeline schedule it runs; goes into its sidecar."""

    class_name: str = field(metadata={"json": "class"})
    """The schedule's class, e.g. ``ScheduleDualPipeV``."""
    name: str
    """Normalized name, e.g. ``dualpipev``: patch_torch.SCHEDULE_NAMES, or ``dualpipe`` for DeepSeek's DualPipe."""
    pp_size: int
    """Pipeline ranks."""
    num_stages: int
    """Global stages (stage indices run 0..num_stages-1)."""
    microbatches: int
    """Micro-batches per step."""
    stages: tuple[int, ...]
    """Global stage indices this rank runs."""
    paths: tuple[MicrobatchPath, ...]
    """Which micro-batches flow through which stages (DualPipe has two directions)."""
    stage_numbering: str = "torch.distributed.pipelining stage_index"
    """How stage indices were assigned."""
    stage_work: tuple[StageWork, ...] = ()
    """Parameters and layers of this rank's stage modules, where they could be counted."""
    pipeline_group: tuple[int, ...] | None = None
    """Global ranks of the process group this rank's pipeline communicates over, by group rank
    (``collectors.groups``); None when unknown."""

    def run_schedule(self) -> RunSchedule:
        """The run-wide part (everything but this rank's stages)."""
        return RunSchedule(
            self.class_name,
            self.name,
            self.pp_size,
            self.num_stages,
            self.microbatches,
            self.paths,
            self.stage_numbering,
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form for the sidecar."""
        return to_json(self)


@dataclass(frozen=True)
class RankSteps:
    """A rank's step window: steps count ``step()`` calls from 0; ranges are ``[first, stop)``."""

    requested: tuple[int, int | None]
    """The window asked for; stop None keeps every step until the process ends."""
    captured: tuple[int, int]
    """The steps this rank's trace holds: every one of them finished."""
    unfinished: int | None = None
    """Window-relative index n of the step (``tracekit:step#n``) that was running when the capture
    stopped (a signal, an exception); the trace is cut at its start. None when no step was cut."""
    last_end_unix_ns: int | None = None
    """When the last captured step ended (wall clock): where a rank that died stopped."""
    seen: int = 0
    """Training steps this process had run when the sidecar was written."""


@dataclass(frozen=True)
class RankEvalCalls:
    """A rank's forward-only schedule calls (evaluations): not training steps, never labelled."""

    in_window: int = 0
    """Those that ran while the profiler was on, between captured steps: unlabelled in the trace."""
    seen: int = 0
    """All this process had run when the sidecar was written."""


@dataclass(frozen=True)
class StageMemory:
    """What one stage module's state takes, counted once as the capture's trace is written (``collectors.memory``)."""

    stage: int
    """Global stage index."""
    params: int
    """Parameters of the stage module (shared ones once)."""
    param_bytes: int
    """Bytes of those parameters' data."""
    grad_bytes: int
    """Bytes of their gradients: one per parameter that requires grad, at its dtype."""
    optimizer_bytes: int
    """Bytes of the tensors any live ``torch.optim.Optimizer`` keeps in its state for them."""


@dataclass(frozen=True)
class RankMemory:
    """How a rank's memory was recorded, its device's capacity and its stages' state bytes."""

    profile_memory: bool
    """True when the profiler recorded memory events (``[memory]`` instants) in the window."""
    device: str
    """``cpu`` or the CUDA device the rank computed on (``cuda:0``)."""
    capacity_bytes: int | None = None
    """The device's memory (CUDA ``total_memory``); None on CPU, whose memory the host's ranks share."""
    stages: tuple[StageMemory, ...] = ()
    """One entry per stage module of this rank the collector saw (patched schedules)."""


@dataclass(frozen=True)
class RankMeta:
    """``rank{r}.meta.json``: what one rank knows of its capture; rewritten as its status changes."""

    rank: int
    """Global rank."""
    world_size: int
    """Ranks of the job, as this rank saw them."""
    status: RankStatus
    """Where this rank's capture stands."""
    format: str = SIDECAR_FORMAT
    """Sidecar format and version."""
    run_id: str | None = None
    """The ``tracekit record`` run this sidecar belongs to; None for ``Capture`` in Python."""
    local_rank: int | None = None
    """LOCAL_RANK of the process, when set."""
    host: str | None = None
    """Host name."""
    pid: int | None = None
    """Process id."""
    torch_version: str | None = None
    """torch.__version__ of the job."""
    trace: str | None = None
    """The trace file's name in the capture directory, once written."""
    problems: tuple[str, ...] = ()
    """What went wrong on this rank, one sentence each."""
    collector_problems: tuple[str, ...] = ()
    """Patches or labelling wrappers that failed in this process and were switched off (a library
    version the collector does not know); the job ran on, those actions unlabelled."""
    interrupted_by: str | None = None
    """The signal (``SIGINT``, ``SIGTERM``) that stopped this rank inside its window, if one did."""
    steps: RankSteps | None = None
    """The step window."""
    eval_calls: RankEvalCalls = RankEvalCalls()
    """Forward-only calls (evaluations), left out of the steps."""
    schedule: ScheduleInfo | None = None
    """The schedule this rank ran, when a patched schedule or the config described it."""
    started_unix_ns: int | None = None
    """When the window opened (wall clock)."""
    written_unix_ns: int | None = None
    """When this sidecar was written (wall clock)."""
    memory: RankMemory | None = None
    """How memory was recorded and the stages' state bytes; written with the trace (None before,
    and in captures older than memory recording)."""


@dataclass(frozen=True)
class RankEntry:
    """One rank of ``run.json``: whether its trace is there and complete, and why not."""

    rank: int
    """Global rank."""
    complete: bool
    """True when the rank's sidecar says complete and its trace file exists."""
    trace: str | None
    """The trace file's name, when it exists."""
    stages: tuple[int, ...] | None
    """Global stages the rank ran; None when unknown."""
    host: str | None
    """Host name; None when unknown."""
    status: EntryStatus
    """The sidecar's status, or ``missing``."""
    problems: tuple[str, ...] = ()
    """Why the rank is incomplete first, then the rank's own problems."""
    unfinished_step: int | None = None
    """``RankSteps.unfinished``: the step the trace is cut at, when one was."""
    interrupted_by: str | None = None
    """The signal that stopped the rank inside its window, when one did."""


@dataclass(frozen=True)
class Interruption:
    """A signal ``tracekit record`` received and passed on to the whole job."""

    signal: str
    """Its name, e.g. ``SIGINT`` (record then exits 130) or ``SIGTERM`` (143)."""
    received_unix_ns: int
    """When record received it (wall clock)."""
    killed_after_grace: bool
    """True when processes of the job were still alive after the grace time and were killed."""
    killed_at_once: bool = False
    """True when a second, deliberate Ctrl-C killed the job before the grace time was up."""


STEPS_NOTE = "tracekit:step#n is job step requested[0] + n (steps count step() calls from 0)"


@dataclass(frozen=True)
class RunSteps:
    """The run's step window, agreed by its complete ranks."""

    requested: tuple[int, int | None] | None = None
    """The window asked for; None when the ranks disagree or none reported one."""
    captured: tuple[int, int] | None = None
    """The steps the complete ranks' traces hold; None when they disagree or none is complete."""
    note: str = STEPS_NOTE
    """How trace step labels map to job steps."""


@dataclass(frozen=True)
class EvalSteps:
    """Forward-only calls (evaluations) inside the capture window: left out of the steps."""

    left_out: int = 0
    """The most any rank ran inside the window; their forwards are in the traces, unlabelled."""


@dataclass(frozen=True)
class Manifest:
    """``run.json``: the merged facts of one capture, written once every rank is done."""

    world_size: int
    """Ranks of the job."""
    complete: bool
    """True when every rank's trace is complete."""
    ranks: tuple[RankEntry, ...]
    """One entry per rank, ``ranks[r].rank == r``."""
    format: str = MANIFEST_FORMAT
    """Manifest format and version."""
    run_id: str | None = None
    """The ``tracekit record`` run; None when merged without one."""
    schedule: RunSchedule | None = None
    """The schedule all ranks agree on; None when none described one or they disagree."""
    pp_size: int | None = None
    """Pipeline ranks (``schedule.pp_size``)."""
    virtual_stages: int | None = None
    """Stages per pipeline rank (``num_stages / pp_size``): 2 for interleaved, V shapes and DualPipe."""
    microbatches: int | None = None
    """Micro-batches per step (``schedule.microbatches``)."""
    rank_to_stages: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Rank -> the global stages it ran, for ranks that described their schedule."""
    stage_work: tuple[StageWork, ...] | None = None
    """One entry per stage whose work a rank counted, by stage; None when none was counted (older
    captures, custom loops)."""
    pipeline_groups: tuple[tuple[int, ...], ...] | None = None
    """The pipelines of a data-parallel x pipeline run: each group the global ranks of one pipeline
    in pipeline-rank order, groups sorted by their first rank; the replica (data-parallel index) of
    a rank is the index of its group. None when unknown (older captures, custom loops, ranks that
    disagree: then ``problems`` says so)."""
    steps: RunSteps = RunSteps()
    """The step window."""
    eval_steps: EvalSteps = EvalSteps()
    """Evaluations inside the window, left out of the steps."""
    torch_version: str | None = None
    """torch.__version__ the ranks agree on."""
    hosts: tuple[str, ...] = ()
    """Host names, sorted."""
    command: tuple[str, ...] | None = None
    """The command ``tracekit record`` ran."""
    exit_code: int | None = None
    """Its exit status (128 + signal when killed)."""
    problems: tuple[str, ...] = ()
    """Run-wide problems found while merging (unreadable sidecars, disagreeing ranks...)."""
    interruption: Interruption | None = None
    """The signal that stopped the job, when one did."""
    left_behind: int = 0
    """Processes the command left running when it exited, stopped by ``tracekit record``."""
    collector_problems: tuple[str, ...] = ()
    """Each collector problem (a patch or wrapper switched off), with the ranks it happened on."""
    mixed_runs: bool = False
    """True when the directory also held traces or sidecars of another run (``problems`` names each
    run's files): such a directory is never ``complete``."""
    earlier_capture: str | None = None
    """The directory (beside run.json) an earlier capture in the same place was moved into."""
    notes: tuple[str, ...] = ()
    """What a reader should know that is not a problem (evaluations left out)."""
    written_unix_ns: int | None = None
    """When run.json was written (wall clock)."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form, as written to run.json."""
        return to_json(self)

    def entry(self, rank: int) -> RankEntry | None:
        """Rank ``rank``'s entry, or None when the manifest has none."""
        return self.ranks[rank] if 0 <= rank < len(self.ranks) else None


def parse_manifest(payload: Any) -> Manifest:
    """Check a run.json payload against the schema; SchemaError naming the first fault."""
    if not isinstance(payload, dict):
        raise SchemaError("expected a JSON object")
    version = payload.get("format")
    if version != MANIFEST_FORMAT:
        raise SchemaError(f"format {version!r} is not {MANIFEST_FORMAT!r} (written by another tracekit?)")
    manifest = from_json(Manifest, payload)
    if manifest.world_size < 0 or len(manifest.ranks) != manifest.world_size:
        raise SchemaError(f"world_size {manifest.world_size} but {len(manifest.ranks)} rank entries")
    for index, entry in enumerate(manifest.ranks):
        if entry.rank != index:
            raise SchemaError(f"ranks[{index}].rank is {entry.rank}, expected {index}")
        if entry.complete and entry.trace is None:
            raise SchemaError(f"ranks[{index}]: complete without a trace")
    strays = sorted(rank for rank in manifest.rank_to_stages if not 0 <= rank < manifest.world_size)
    if strays:
        raise SchemaError(f"rank_to_stages names rank {strays[0]} outside 0..{manifest.world_size - 1}")
    whole = bool(manifest.ranks) and all(entry.complete for entry in manifest.ranks)
    if manifest.complete != (whole and not manifest.mixed_runs):
        raise SchemaError("complete disagrees with the ranks' entries")
    _check_pipeline_groups(manifest.pipeline_groups or (), manifest.world_size)
    return manifest


def _check_pipeline_groups(groups: tuple[tuple[int, ...], ...], world_size: int) -> None:
    """SchemaError unless the groups are non-empty, of one size, disjoint, in range and sorted by first rank."""
    seen: set[int] = set()
    for index, group in enumerate(groups):
        where = f"pipeline_groups[{index}]"
        if not group or len(group) != len(groups[0]):
            raise SchemaError(f"{where} holds {len(group)} ranks, pipeline_groups[0] {len(groups[0])}")
        strays = [rank for rank in group if not 0 <= rank < world_size]
        if strays:
            raise SchemaError(f"{where} names rank {strays[0]} outside 0..{world_size - 1}")
        twice = sorted(seen.intersection(group)) or sorted(r for r in set(group) if group.count(r) > 1)
        if twice:
            raise SchemaError(f"{where}: rank {twice[0]} is in two pipeline groups")
        seen.update(group)
        if index and group[0] <= groups[index - 1][0]:
            raise SchemaError(f"{where}: groups are not sorted by their first rank")


def parse_rank_meta(payload: Any) -> RankMeta:
    """Check a sidecar payload against the schema; SchemaError naming the first fault."""
    if isinstance(payload, dict) and payload.get("format", SIDECAR_FORMAT) != SIDECAR_FORMAT:
        raise SchemaError(f"format {payload['format']!r} is not {SIDECAR_FORMAT!r}")
    return from_json(RankMeta, payload)


__all__ = [
    "CAPTURE_FILES",
    "INCOMING_PREFIX",
    "RUN_ID_METADATA",
    "TRACE_FILE",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "SIDECAR",
    "SIDECAR_FORMAT",
    "EvalSteps",
    "Interruption",
    "Manifest",
    "MicrobatchPath",
    "RankEntry",
    "RankEvalCalls",
    "RankMeta",
    "RankSteps",
    "RunSchedule",
    "RunSteps",
    "ScheduleInfo",
    "SchemaError",
    "StageMemory",
    "RankMemory",
    "StageWork",
    "parse_manifest",
    "parse_rank_meta",
    "sidecar_name",
    "trace_name",
]
