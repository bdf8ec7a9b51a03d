"""What makes two stages' work comparable: per-stage parameter and layer counts from ``run.json``.

The collector records, once per stage when the capture window opens, the stage module's parameter
count, the share of it held by embedding tables, and its layer count (``collectors.capture``,
``StageWork``). The expected-cost model (``tracekit.analysis.references``) scales durations by
``compute_params``:

- a matmul's cost per token is proportional to its weights (2 FLOPs per parameter forward, 4
  backward), so a stage's compute scales with its parameters;
- an embedding table is a lookup (its cost is one row per token, not its size), so its parameters
  are left out of ``compute_params``; a stage holding only an embedding falls back to its layers;
- a head (the output projection to the vocabulary) is a matmul: its parameters count in full, so
  the last stage comes out as heavy as its head makes it. The loss itself is not modelled.

``STAGE_WORK_SCHEMA``, one row per stage:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| stage | Int32 | global stage index | never null |
| params | Int64 | parameters of the stage module | never null |
| embedding_params | Int64 | parameters held by embedding tables (``nn.Embedding``) | never null |
| layers | Int64 | repeated blocks (longest ModuleList/ModuleDict), else parameterized leaf modules | never null |
| compute_params | Int64 | params - embedding_params | never null |
| work | Float64 | the scale of the expected cost: compute_params, or layers when it is 0 | never null |

Not for: reading traces or judging durations (``scoring``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import polars as pl

from collectors.manifest import Manifest
from tracekit.errors import TracekitError

STAGE_WORK_SCHEMA: dict[str, pl.DataType] = {
    "stage": pl.Int32(),
    "params": pl.Int64(),
    "embedding_params": pl.Int64(),
    "layers": pl.Int64(),
    "compute_params": pl.Int64(),
    "work": pl.Float64(),
}

MANIFEST_KEY = "stage_work"
"""The run.json field holding one entry per stage (``collectors.manifest.StageWork``)."""

_FIELDS = ("stage", "params", "embedding_params", "layers")


def empty_stage_work() -> pl.DataFrame:
    """A frame of ``STAGE_WORK_SCHEMA`` with no stage: nothing recorded."""
    return pl.DataFrame(schema=STAGE_WORK_SCHEMA)


def stage_work_frame(entries: list[dict[str, Any]], source: str = "run.json") -> pl.DataFrame:
    """``STAGE_WORK_SCHEMA`` from per-stage entries (keys of ``_FIELDS``); TracekitError naming the bad one."""
    rows = []
    for entry in entries:
        if any(not isinstance(entry.get(name), int) or entry[name] < 0 for name in _FIELDS):
            raise TracekitError(
                f"{MANIFEST_KEY} entry {entry!r} needs non-negative integers {', '.join(_FIELDS)}", source
            )
        if entry["embedding_params"] > entry["params"]:
            raise TracekitError(f"{MANIFEST_KEY} entry {entry!r}: embedding_params exceed params", source)
        rows.append(tuple(entry[name] for name in _FIELDS))
    types = (pl.Int32(), pl.Int64(), pl.Int64(), pl.Int64())
    frame = pl.DataFrame(rows, schema=dict(zip(_FIELDS, types)), orient="row")
    if frame["stage"].is_duplicated().any():
        raise TracekitError(f"{MANIFEST_KEY} lists a stage twice", source)
    return (
        frame.with_columns((pl.col("params") - pl.col("embedding_params")).alias("compute_params"))
        .with_columns(
            pl.when(pl.col("compute_params") > 0)
            .then(pl.col("compute_params").cast(pl.Float64()))
            .otherwise(pl.col("layers").cast(pl.Float64()))
            .alias("work")
        )
        .sort("stage")
        .select(list(STAGE_WORK_SCHEMA))
    )


def stage_work(manifest: Manifest | None, source: str = "run.json") -> pl.DataFrame:
    """The stage work a run's manifest records (an empty frame when it records none)."""
    if manifest is None or manifest.stage_work is None:
        return empty_stage_work()
    return stage_work_frame([asdict(work) for work in manifest.stage_work], source)
