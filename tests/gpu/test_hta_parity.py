"""HTA-compatible figures agree with HolisticTraceAnalysis 0.5.0 on the traces it was run on."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.gpu.hta_compat import hta_breakdown, hta_class
from tracekit.trace.run import load_run

PERCENTAGES = ["idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct"]
TIMES = ["idle_time_us", "compute_time_us", "non_compute_time_us", "kernel_time_us"]


@pytest.mark.parametrize(
    ("name", "steps_filtered"), [("param-dlrm-8rank", False), ("hta-sampled-2rank", True)]
)
def test_matches_hta_within_a_tenth_of_a_point(shared: Path, name: str, steps_filtered: bool) -> None:
    expected = pl.read_csv(shared / "expected" / f"hta-0.5.0-{name}.csv")

    result = hta_breakdown(load_run(shared / "traces" / name, workers=1))

    assert result.steps_filtered is steps_filtered
    joined = result.frame.join(expected, on="rank", suffix="_hta", how="full")
    assert joined.height == expected.height and joined["rank"].null_count() == 0
    for column in PERCENTAGES:
        assert ((joined[column] - joined[f"{column}_hta"]).abs() <= 0.1).all(), column
    for column in TIMES:  # HTA prints whole µs: ours are the same integers
        assert (joined[column] == joined[f"{column}_hta"].cast(pl.Int64())).all(), column


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)", "communication"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "communication"),
        ("Memcpy HtoD (Pinned -> Device)", "memory"),
        ("Memset (Device)", "memory"),
        ("void at::native::vectorized_elementwise_kernel<4>(int)", "compute"),
        ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*)", "compute"),
        ("Event Sync", "other"),
    ],
)
def test_hta_kernel_types(name: str, expected: str) -> None:
    assert pl.select(hta_class(pl.lit(name))).item() == expected
