"""Progress bars on stderr, drawn only on a terminal: traces ingested, simulations run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tracekit.perrank.engine import Engine
from tracekit.run_analysis import AnalysisConfig, RunAnalysis, analyse


def analyse_with_progress(
    source: Path, config: AnalysisConfig, meta: Path | None = None, engine: Engine | None = None
) -> RunAnalysis:
    """``tracekit.analyse`` with a transient bar (drawn only on a terminal) counting ranks read and reduced."""
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("reading traces"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
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
    console = Console(stderr=True)
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.advance(task)
