"""The event table: one row per complete ("X") event of a Kineto trace, all ranks in one frame.

This is the one schema every reader produces and every analysis consumes. Times are integer
nanoseconds on the rank's own clock, made absolute with the trace's ``baseTimeNanoseconds`` when it
has one, so ranks of one host share a time axis.

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank of the process that wrote the trace | never null |
| cat | String | Kineto category: cpu_op, user_annotation, kernel, gpu_memcpy, ... | never null |
| name | String | operator, kernel or label name | never null |
| pid | Int64 | process id (CPU events) or device index (GPU events) | pid was not an integer |
| tid | Int64 | thread id (CPU events) or CUDA stream (GPU events) | tid was not an integer |
| start_ns | Int64 | start time, ns | never null |
| dur_ns | Int64 | duration, ns, >= 0 | never null |
| correlation | Int64 | CPU launch <-> GPU activity link (``args.correlation``, else the ``ac2g`` flow id) | event has none |
| external_id | Int64 | ``args["External id"]``: links GPU work to the CPU op | event has none |
| device | Int32 | GPU index (``args.device``) | a CPU event |
| stream | Int64 | CUDA stream (``args.stream``) | a CPU event |

Not for: reading trace files (``tracekit.trace.kineto``) or what the events mean (``tracekit.analysis``).
"""

from __future__ import annotations

import polars as pl

from tracekit.errors import TracekitError

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "cat": pl.String(),
    "name": pl.String(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "start_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "device": pl.Int32(),
    "stream": pl.Int64(),
}

EVENT_SCHEMA_VERSION = 3
"""Bumped whenever the event table's columns or their meaning change; it keys the Parquet cache."""


def validate_events(frame: pl.DataFrame, source: str) -> pl.DataFrame:
    """Check ``frame`` has exactly the event schema; raises TracekitError naming ``source`` otherwise."""
    if dict(frame.schema) != EVENT_SCHEMA:
        raise TracekitError(f"event table has schema {dict(frame.schema)}, expected {EVENT_SCHEMA}", source)
    return frame


def empty_events() -> pl.DataFrame:
    """An event table with no rows."""
    return pl.DataFrame(schema=EVENT_SCHEMA)
