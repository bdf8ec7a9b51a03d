"""Argument checks shared by the schedule generators: bad sizes are user input errors."""

from __future__ import annotations

from tracekit.schedule.model import ScheduleError


def require_positive(schedule: str, **sizes: int) -> None:
    """Raise ScheduleError unless every named size is an integer >= 1."""
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ScheduleError(f"{schedule}: --{name} must be an integer >= 1, got {value!r}")


def require(condition: bool, schedule: str, message: str) -> None:
    """Raise ScheduleError with ``schedule: message`` unless ``condition`` holds."""
    if not condition:
        raise ScheduleError(f"{schedule}: {message}")
