"""The one exception type for bad user input; the command line turns it into a one-line message."""

from __future__ import annotations

from pathlib import Path


class TracekitError(Exception):
    """User input tracekit cannot use: a bad trace file, a bad directory, a bad argument."""

    def __init__(self, message: str, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else None
        super().__init__(f"{path}: {message}" if path is not None else message)
