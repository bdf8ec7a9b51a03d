"""Schedule labels on a GPU trace are timed by the GPU work they launched, not by their launch."""

from __future__ import annotations

import polars as pl

from tracekit.analysis.realized import REALIZED_SCHEMA, Clock
from tracekit.run_analysis import RunAnalysis
from tracekit.trace.run import load_run


def _attn_as_actions(document: dict) -> None:
    """Rename DeepSeek's attn(F)/attn(B) labels of layer i to the actions tracekit:0Fi / tracekit:0Bi."""
    seen = {"F": 0, "B": 0}
    for event in document["traceEvents"]:
        if event.get("cat") == "user_annotation" and event["name"] in ("attn(F)", "attn(B)"):
            kind = event["name"][5]
            event["name"] = f"tracekit:0{kind}{seen[kind]}"
            seen[kind] += 1
    document["distributedInfo"]["world_size"] = 1


def test_actions_take_gpu_times(edited_deepseek) -> None:
    run = load_run(edited_deepseek(_attn_as_actions).parent, workers=1)

    analysis = RunAnalysis.of_run(run)

    assert analysis.gpu is not None and analysis.clock is Clock.GPU
    actions = analysis.actions
    assert dict(actions.schema) == REALIZED_SCHEMA and actions.height == 8
    labels = run.events.filter(pl.col("name").str.starts_with("tracekit:0")).sort("start_ns")
    gpu = actions.sort("start_ns")
    # Each action starts on the GPU after its label opened on the CPU, and ends when its kernels end.
    assert (gpu["start_ns"] >= labels["start_ns"]).all()
    assert not gpu["end_ns"].equals(labels["start_ns"] + labels["dur_ns"])
    first_forward = gpu.filter((pl.col("kind") == "F") & (pl.col("microbatch") == 0)).row(0, named=True)
    assert (
        first_forward["start_ns"] - labels["start_ns"][0],
        first_forward["end_ns"] - labels["start_ns"][0],
    ) == (
        205_000,
        5_038_000,  # kernels at 0.908-5.741 ms after the first label, which opened at 0.703 ms
    )
    assert analysis.utilization.per_rank["busy_ns"].item() == (gpu["end_ns"] - gpu["start_ns"]).sum()
