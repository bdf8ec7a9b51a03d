"""The schedule model: a pipeline schedule as plain data, one ordered list of steps per rank.

A ``Schedule`` is what every generator returns and what the timing engine replays: the number of
pipeline ranks, stages and micro-batches, the micro-batches' paths, and for each rank its ordered
steps (``Action`` or ``OverlappedPair``). Stage numbering is the convention shared with the
collector (docs/schedules.md): along a micro-batch's path stage ``s`` feeds stage ``s + 1``. Most
schedules have one path through stages ``0 .. S-1``; DualPipe has two, one per direction, over
disjoint stages (each a full copy of the model's layers), so the dependencies of any schedule
follow from its actions and paths alone.

This module holds values and pure checks only: no timing (``engine``), no generators. ``MicrobatchPath``
is the capture contract's (``collectors.manifest``), so a run's recorded paths are the simulator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from collectors.manifest import MicrobatchPath
from tracekit.errors import TracekitError
from tracekit.schedule.action import Kind, OverlappedPair, Step, flatten


class ScheduleError(TracekitError):
    """A schedule tracekit cannot generate or replay: bad sizes, missing or repeated actions, deadlock."""


@dataclass(frozen=True)
class Schedule:
    """Each rank's ordered steps for one training step of a pipeline-parallel job."""

    name: str
    """Schedule name (``1f1b``, ``dualpipe``, ``realized``...)."""
    num_ranks: int
    """Pipeline ranks (devices)."""
    num_stages: int
    """Stages along a micro-batch's path; stage ``s`` feeds stage ``s + 1``."""
    num_microbatches: int
    """Micro-batches per training step."""
    steps: tuple[tuple[Step, ...], ...]
    """``steps[rank]``: that rank's steps in execution order."""
    paths: tuple[MicrobatchPath, ...] = ()
    """The micro-batches' paths; empty means one path, all micro-batches through all stages."""

    def __post_init__(self) -> None:
        if self.num_ranks < 1 or self.num_stages < 1 or self.num_microbatches < 1:
            raise ScheduleError(
                f"{self.name}: ranks, stages and micro-batches must be >= 1, got "
                f"{self.num_ranks}, {self.num_stages}, {self.num_microbatches}"
            )
        if len(self.steps) != self.num_ranks:
            raise ScheduleError(f"{self.name}: {len(self.steps)} rank lists for {self.num_ranks} ranks")
        if not self.paths:
            whole = MicrobatchPath(0, self.num_microbatches, 0, self.num_stages - 1)
            object.__setattr__(self, "paths", (whole,))
        covered = sorted((p.first_microbatch, p.stop_microbatch) for p in self.paths)
        bounds = [edge for span in covered for edge in span]
        contiguous = all(bounds[i] == bounds[i + 1] for i in range(1, len(bounds) - 1, 2))
        if bounds[0] != 0 or bounds[-1] != self.num_microbatches or not contiguous:
            raise ScheduleError(
                f"{self.name}: paths {self.paths} do not cover micro-batches 0..{self.num_microbatches - 1} once"
            )
        if not all(0 <= p.first_stage <= p.last_stage < self.num_stages for p in self.paths):
            raise ScheduleError(f"{self.name}: a path leaves stages 0..{self.num_stages - 1}: {self.paths}")

    @cached_property
    def path_bounds(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(first stage, last stage) of each micro-batch's path, indexed by micro-batch."""
        first = [0] * self.num_microbatches
        last = [0] * self.num_microbatches
        for path in self.paths:
            for mb in range(path.first_microbatch, path.stop_microbatch):
                first[mb], last[mb] = path.first_stage, path.last_stage
        return tuple(first), tuple(last)

    @property
    def stages_per_rank(self) -> int:
        """Stages one rank's share of a model copy is cut into (v): 2 for V shapes, 1 for DualPipe."""
        longest = max(p.last_stage - p.first_stage + 1 for p in self.paths)
        return max(1, longest // self.num_ranks)

    @property
    def param_copies(self) -> int:
        """Copies of the model's parameters the ranks hold together: one per path (2 for DualPipe)."""
        return len(self.paths)

    @property
    def num_actions(self) -> int:
        """Compute actions in the schedule, an overlapped pair counting as its two halves."""
        return sum(
            len(step.halves) if isinstance(step, OverlappedPair) else 1
            for steps in self.steps
            for step in steps
        )

    def format(self) -> str:
        """One line per rank, torch's notation: ``rank 0: 0F0 0F1 (0F2;3B0)OVERLAP_F_B ...``."""
        return "\n".join(
            f"rank {rank}: " + " ".join(map(str, steps)) for rank, steps in enumerate(self.steps)
        )


def backward_kind(split: bool) -> Kind:
    """The backward that carries the gradient on: I when W runs apart, else the full B."""
    return Kind.BACKWARD_INPUT if split else Kind.FULL_BACKWARD


def missing_actions(schedule: Schedule) -> list[str]:
    """Every way ``schedule`` breaks "each (stage, micro-batch) runs F once, its backward once, W iff I"."""
    seen: dict[tuple[int, Kind, int], int] = {}
    problems: list[str] = []
    for steps in schedule.steps:
        for action in flatten(steps):
            if action.stage >= schedule.num_stages or action.microbatch >= schedule.num_microbatches:
                problems.append(
                    f"{action} is outside {schedule.num_stages} stages x {schedule.num_microbatches} micro-batches"
                )
            key = (action.stage, action.kind, action.microbatch)
            seen[key] = seen.get(key, 0) + 1
    for path in schedule.paths:
        for stage, microbatch in _path_cells(path):
            forwards = seen.get((stage, Kind.FORWARD, microbatch), 0)
            full = seen.get((stage, Kind.FULL_BACKWARD, microbatch), 0)
            inputs = seen.get((stage, Kind.BACKWARD_INPUT, microbatch), 0)
            weights = seen.get((stage, Kind.BACKWARD_WEIGHT, microbatch), 0)
            name = f"stage {stage} micro-batch {microbatch}"
            if forwards != 1:
                problems.append(f"{name}: F runs {forwards} times")
            if full + inputs != 1:
                problems.append(f"{name}: backward (B or I) runs {full + inputs} times")
            if weights != inputs:
                problems.append(f"{name}: {inputs} I but {weights} W")
    on_paths = {cell for path in schedule.paths for cell in _path_cells(path)}
    problems += [
        f"{stage}{kind.value}{mb} is off its micro-batch's path"
        for stage, kind, mb in seen
        if (stage, mb) not in on_paths
    ]
    return problems


def _path_cells(path: MicrobatchPath) -> list[tuple[int, int]]:
    return [
        (stage, mb)
        for stage in range(path.first_stage, path.last_stage + 1)
        for mb in range(path.first_microbatch, path.stop_microbatch)
    ]
