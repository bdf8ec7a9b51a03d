"""The GPU streams of the Perfetto export: each rank's kernels, copies and memsets on their streams.

Read one rank at a time from the run's Parquet cache, within the rank's exported span, moved to
the file's clock. Not for: the actions (``tracekit.present.perfetto``).
"""

from __future__ import annotations

from typing import Any

import orjson
import polars as pl

from tracekit.present.perfetto_events import meta, us
from tracekit.run_analysis import RunAnalysis

GPU_TID_BASE = 1000
"""A GPU stream's thread id: this plus the stream number."""
KERNEL_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
"""The raw GPU work kept with ``kernels`` (GPU copies of user annotations would repeat the labels)."""


def kernel_events(analysis: RunAnalysis, rank: int, first_ns: int, last_ns: int, shift_ns: int) -> bytes:
    """One rank's GPU work within [first_ns, last_ns) on its own clock, moved by ``shift_ns`` to the file's time."""
    kernels = (
        analysis.run.rank_events(rank)
        .filter(gpu_filter(first_ns, last_ns))
        .select("cat", "name", "start_ns", "dur_ns", "device", "stream", "correlation")
        .collect()
    )
    streams = kernels.select("device", "stream").unique().sort("device", "stream")
    events: list[dict[str, Any]] = [
        meta(rank, "thread_name", f"GPU {device} stream {stream}", GPU_TID_BASE + (stream or 0))
        for device, stream in streams.iter_rows()
    ]
    for cat, name, start, dur, device, stream, correlation in kernels.iter_rows():
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": rank,
                "tid": GPU_TID_BASE + (stream or 0),
                "ts": us(start + shift_ns),
                "dur": us(dur),
                "args": {"device": device, "stream": stream, "correlation": correlation},
            }
        )
    return b",".join(orjson.dumps(event) for event in events)


def gpu_filter(first_ns: int, last_ns: int) -> pl.Expr:
    """GPU work (``KERNEL_CATEGORIES``) overlapping [first_ns, last_ns) on the rank's own clock."""
    return (
        pl.col("cat").is_in(KERNEL_CATEGORIES)
        & (pl.col("start_ns") < last_ns)
        & (pl.col("start_ns") + pl.col("dur_ns") > first_ns)
    )


def gpu_spans(analysis: RunAnalysis) -> dict[int, tuple[int, int]]:
    """Rank -> first start and last end of its GPU work (own clock): an unlabelled run's exported span."""
    spans = {}
    for rank in analysis.run.ranks:
        first, last = (
            analysis.run.rank_events(rank)
            .filter(pl.col("cat").is_in(KERNEL_CATEGORIES))
            .select(
                pl.col("start_ns").min().alias("first"),
                (pl.col("start_ns") + pl.col("dur_ns")).max().alias("last"),
            )
            .collect()
            .row(0)
        )
        if first is not None:
            spans[rank] = (first, last + 1)
    return spans
