"""Step summaries cut from a real captured trace, for the live tests."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tracekit.live.summaries import StepSummary

SAMPLE_1F1B = "sample_traces/1f1b"


def _recorded(sample: str) -> dict:
    return json.loads((Path(__file__).resolve().parents[2] / sample / "run.json").read_text())


def _sample_stage_work(sample: str) -> dict[int, tuple[int, int, int, int]]:
    """(stage, params, embedding_params, layers) per stage, as the sample's run.json records it."""
    return {
        work["stage"]: (work["stage"], work["params"], work["embedding_params"], work["layers"])
        for work in _recorded(sample)["stage_work"]
    }


def summaries_of(actions: pl.DataFrame, host: str = "host-a", sample: str = SAMPLE_1F1B) -> list[StepSummary]:
    """One StepSummary per (rank, step) of a realized-actions frame, as a rank would have sent it.

    ``sample`` is the committed run the actions come from. Each carries the work of its stages and
    the schedule's class as the sample recorded them (the collector sends both with every summary),
    so a live interval is judged against the same references, on the same replay, as the offline run.
    """
    work = _sample_stage_work(sample)
    recorded = _recorded(sample)
    world_size = recorded["world_size"]
    schedule_class = (recorded.get("schedule") or {}).get("class")
    summaries = []
    for (rank, step), rows in actions.sort("rank", "step", "start_ns").group_by(
        "rank", "step", maintain_order=True
    ):
        start = int(rows["start_ns"].min())
        summaries.append(
            StepSummary(
                rank=rank,
                world_size=world_size,
                host=host,
                pid=1000 + rank,
                step=step,
                start_ns=start,
                duration_ns=int(rows["end_ns"].max()) - start,
                comm_ns=0,
                clock="cpu",
                profiled=False,
                dropped=0,
                actions=tuple(
                    (
                        r["stage"],
                        r["kind"],
                        r["microbatch"],
                        r["start_ns"] - start,
                        r["end_ns"] - start,
                        r["overlapped"],
                    )
                    for r in rows.iter_rows(named=True)
                ),
                stage_work=tuple(work[stage] for stage in sorted(set(rows["stage"].to_list())) if stage in work),
                schedule_class=schedule_class,
            )
        )
    return summaries


def slowed(actions: pl.DataFrame, rank: int, kind: str, factor: float) -> pl.DataFrame:
    """``actions`` with ``rank``'s ``kind`` actions lasting ``factor`` times as long (ends moved)."""
    hit = (pl.col("rank") == rank) & (pl.col("kind") == kind)
    longer = (pl.col("start_ns") + (pl.col("end_ns") - pl.col("start_ns")) * factor).cast(pl.Int64())
    return actions.with_columns(pl.when(hit).then(longer).otherwise(pl.col("end_ns")).alias("end_ns"))
