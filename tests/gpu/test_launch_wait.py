"""The GPU idle inside a span that waited on its CPU's launches: by hand, and on the real GPU traces."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.gpu.timeline import GPU_SCHEMA, gpu_timeline, project_spans
from tracekit.trace.kineto import read_trace


def _kernels(rows: list[tuple[int, int, int, int, int]]) -> pl.DataFrame:
    """(stream, start, end, launch start, launch end) rows of rank 0 as a GPU_SCHEMA frame."""
    return pl.DataFrame(
        [
            {
                "rank": 0,
                "device": 0,
                "stream": stream,
                "cat": "kernel",
                "name": "gemm",
                "start_ns": start,
                "end_ns": end,
                "correlation": index,
                "kernel_class": "compute",
                "comm_class": None,
                "launch_ns": launch,
                "launch_end_ns": launch_end,
            }
            for index, (stream, start, end, launch, launch_end) in enumerate(rows)
        ],
        schema=GPU_SCHEMA,
    )


def _project(activities: pl.DataFrame, start: int = 0, end: int = 1_000) -> dict:
    spans = pl.DataFrame({"span_id": [0], "rank": [0], "start_ns": [start], "end_ns": [end]}).cast(
        {"span_id": pl.UInt32(), "rank": pl.Int32(), "start_ns": pl.Int64(), "end_ns": pl.Int64()}
    )
    return project_spans(spans, activities).to_dicts()[0]


def test_a_gap_counts_until_the_next_launch_returned() -> None:
    # Kernel 2's launch returns at 150, 50 ns into the 100 ns gap after kernel 1; kernel 3 was
    # launched long before its gap (it waited on something else): only 50 ns waited on the CPU.
    activities = _kernels([(7, 0, 100, 0, 10), (7, 200, 300, 140, 150), (7, 400, 500, 20, 30)])

    row = _project(activities)

    assert (row["gpu_busy_ns"], row["launch_wait_ns"]) == (300, 50)
    assert row["launching_ns"] == 150  # the last launch returned 150 ns into the span's GPU extent


def test_work_on_another_stream_fills_the_gap() -> None:
    # Stream 8 runs 100-250 while stream 7 waits for a late launch: the GPU was busy, not waiting.
    activities = _kernels([(7, 0, 100, 0, 10), (8, 100, 250, 20, 30), (7, 260, 300, 200, 255)])

    row = _project(activities)

    assert (row["gpu_busy_ns"], row["launch_wait_ns"]) == (290, 5)


@pytest.mark.parametrize(
    ("trace", "label", "least", "most"),
    [
        # V100 DLRM: the GPU is idle about half the step, nearly all of it waiting on launches.
        ("param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz", "ProfilerStep#10", 0.40, 0.55),
        # H800 DeepSeek chunk: the CPU runs far ahead; the GPU hardly ever waits on a launch.
        ("deepseek-v3-dualpipe-chunk/train.json.gz", "ProfilerStep#1", 0.0, 0.001),
    ],
)
def test_the_real_traces_launch_wait(shared: Path, trace: str, label: str, least: float, most: float) -> None:
    events, _ = read_trace(shared / "traces" / trace)
    activities = gpu_timeline(events).activities
    spans = (
        events.filter((pl.col("cat") == "user_annotation") & (pl.col("name") == label))
        .select("rank", "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
        .with_row_index("span_id")
    )

    row = project_spans(spans, activities).to_dicts()[0]
    extent = row["gpu_end_ns"] - row["gpu_start_ns"]

    assert row["launch_wait_ns"] <= extent - row["gpu_busy_ns"]
    assert least <= row["launch_wait_ns"] / extent <= most
