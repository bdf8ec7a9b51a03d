"""DeepSeek's published DualPipe chunk trace: sub-chunk schedule on the GPU, streams, hidden all-to-all."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.gpu.analysis import GpuAnalysis, analyse_gpu
from tracekit.trace.run import load_run

LAYER = [
    ("combine", "B"),
    ("attn", "F"),
    ("mlp", "B"),
    ("dispatch", "F"),
    ("dispatch", "B"),
    ("mlp", "W"),
    ("mlp", "F"),
    ("attn", "B"),
    ("attn", "W"),
    ("combine", "F"),
]
"""The label order DeepSeek's trace shows for each of its 4 MoE layers (read from the trace)."""


@pytest.fixture(scope="module")
def analysis(shared: Path) -> GpuAnalysis:
    return analyse_gpu(load_run(shared / "traces" / "deepseek-v3-dualpipe-chunk", workers=1))


def test_subchunk_schedule_is_four_layers_of_ten_phases(analysis: GpuAnalysis) -> None:
    subchunks = analysis.subchunks

    assert list(zip(subchunks["op"], subchunks["kind"])) == LAYER * 4
    assert (subchunks["kernels"] > 0).all()
    # Work cannot start on the GPU before the CPU launched it.
    assert (subchunks["gpu_start_ns"] >= subchunks["cpu_start_ns"]).all()


def test_dispatch_and_combine_are_communication_attn_and_mlp_compute(analysis: GpuAnalysis) -> None:
    by_op = analysis.subchunks.group_by("op").agg(pl.col("compute_ns").sum(), pl.col("comm_ns").sum())
    sums = {row["op"]: (row["compute_ns"], row["comm_ns"]) for row in by_op.iter_rows(named=True)}

    assert sums["attn"][1] == 0 and sums["mlp"][1] == 0
    assert sums["dispatch"][1] > 10 * sums["dispatch"][0]  # DeepEP's layout kernel is local compute
    assert sums["combine"][1] > 10 * sums["combine"][0]


def test_forward_combine_runs_under_backward_attention(analysis: GpuAnalysis) -> None:
    rows = analysis.subchunks.to_dicts()
    combine_f = [row for row in rows if (row["op"], row["kind"]) == ("combine", "F")]
    attn_b = [row for row in rows if (row["op"], row["kind"]) == ("attn", "B")]

    # DualPipe's point: each layer's forward combine overlaps the backward attention on the GPU,
    # although on the CPU the combine(F) label comes after attn(B) and attn(W).
    for combine, attention in zip(combine_f, attn_b, strict=True):
        assert combine["cpu_start_ns"] > attention["cpu_end_ns"]
        assert (
            combine["gpu_start_ns"] < attention["gpu_end_ns"]
            and attention["gpu_start_ns"] < combine["gpu_end_ns"]
        )


def test_streams_and_hidden_all_to_all(analysis: GpuAnalysis) -> None:
    streams = {row["stream"]: row for row in analysis.streams.to_dicts()}
    overlap = {row["comm_class"]: row for row in analysis.overlap.to_dicts()}
    breakdown = analysis.breakdown.row(0, named=True)

    assert sorted(streams) == [7, 23, 27]
    assert streams[27]["comm_ns"] == streams[27]["busy_ns"] - streams[27]["compute_ns"] == 113_030_000
    assert streams[7]["comm_ns"] == 0 and streams[23]["comm_ns"] == 0
    assert set(overlap) == {"ep_dispatch", "ep_combine", "ep_other", "all"}
    assert (overlap["all"]["comm_ns"], overlap["all"]["overlap_ns"]) == (113_030_000, 108_868_000)
    assert overlap["all"]["exposed_ns"] == 4_162_000
    assert overlap["ep_dispatch"]["overlap_pct"] > 97 and overlap["ep_combine"]["overlap_pct"] > 95
    assert breakdown["idle_pct"] < 0.5 and breakdown["p2p_wait_ns"] == 0
