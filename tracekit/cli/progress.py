"""Progress bars on stderr, drawn only on a terminal: traces ingested, simulations run."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.perrank.engine import Engine
from tracekit.run_analysis import AnalysisConfig, RunAnalysis, analyse

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


def _terminal() -> Console | None:
    """A console on stderr when stderr is a terminal; None otherwise, without importing rich."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console  # here: a bar is drawn on a terminal only

    console = Console(stderr=True)
    return console if console.is_terminal else None


def _bar(label: str, console: Console) -> Progress:
    """A transient bar on ``console``: label, bar, done of total, time elapsed."""
    from rich.progress import (  # here: a bar is drawn on a terminal only
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True
    )


def analyse_with_progress(
    source: Path, config: AnalysisConfig, meta: Path | None = None, engine: Engine | None = None
) -> RunAnalysis:
    """``tracekit.analyse`` with a transient bar (drawn only on a terminal) counting ranks read and reduced."""
    console = _terminal()
    if console is None:
        return analyse(source, config, meta=meta, engine=engine)
    progress = _bar("reading traces", console)
    with progress:
        task = progress.add_task("ingest", total=None)
        return analyse(
            source,
            config,
            meta=meta,
            engine=engine,
            on_start=lambda total: progress.update(task, total=total),
            on_file=lambda _path: progress.advance(task),
        )


@contextmanager
def working(label: str, total: int) -> Iterator[Callable[[], None]]:
    """A transient bar of ``total`` parts (drawn only on a terminal); yields the call that advances it."""
    console = _terminal()
    if console is None:
        yield lambda: None
        return
    progress = _bar(label, console)
    with progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)
