"""Busy, idle, p2p waiting and overlap on small GPU timelines whose answers are known by hand."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.gpu.breakdown import gpu_breakdown, p2p_waits, stream_activity
from tracekit.gpu.overlap import comm_overlap
from tracekit.gpu.timeline import GPU_SCHEMA

SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*)"
GEMM = "sm90_xmma_gemm_bf16"


def _activities(rows: list[tuple[int, int, str, int, int, str, str | None]]) -> pl.DataFrame:
    """(rank, stream, name, start, end, class, comm class) rows as a GPU_SCHEMA frame."""
    return pl.DataFrame(
        [
            {
                "rank": rank,
                "device": rank,
                "stream": stream,
                "cat": "kernel",
                "name": name,
                "start_ns": start,
                "end_ns": end,
                "correlation": None,
                "kernel_class": klass,
                "comm_class": comm,
                "launch_ns": None,
            }
            for rank, stream, name, start, end, klass, comm in rows
        ],
        schema=GPU_SCHEMA,
    )


def test_p2p_waiting_is_idle_not_busy() -> None:
    # Rank 0's send starts at 0 but its peer's receive only at 60: 60 ns of waiting, 40 of transfer.
    activities = _activities(
        [
            (0, 20, SENDRECV, 0, 100, "communication", "p2p"),
            (0, 7, GEMM, 10, 30, "compute", None),
            (1, 20, SENDRECV, 60, 101, "communication", "p2p"),
            (1, 7, GEMM, 0, 50, "compute", None),
        ]
    )

    waited = p2p_waits(activities)
    breakdown = {row["rank"]: row for row in gpu_breakdown(waited).to_dicts()}

    waits = waited.filter(pl.col("comm_class") == "p2p").sort("rank")
    assert waits["wait_ns"].to_list() == [60, 0] and waits["peer_rank"].to_list() == [1, 0]
    assert (breakdown[0]["window_ns"], breakdown[0]["busy_ns"], breakdown[0]["comm_ns"]) == (100, 60, 40)
    # Waiting overlapped by the GEMM (10-30) is busy; the other 40 ns of waiting are idle.
    assert (breakdown[0]["p2p_wait_ns"], breakdown[0]["idle_ns"]) == (40, 40)
    assert (breakdown[1]["window_ns"], breakdown[1]["busy_ns"], breakdown[1]["idle_ns"]) == (101, 91, 10)


def test_p2p_without_peer_counts_as_transfer() -> None:
    activities = _activities([(0, 20, SENDRECV, 0, 100, "communication", "p2p")])

    waited = p2p_waits(activities)

    assert waited["wait_ns"].to_list() == [None]
    assert gpu_breakdown(waited)["busy_ns"].to_list() == [100]


def test_overlap_and_exposed_per_class() -> None:
    activities = _activities(
        [
            (0, 7, GEMM, 0, 100, "compute", None),
            (0, 27, "void deep_ep::intranode::dispatch<8>(int4*)", 50, 150, "communication", "ep_dispatch"),
            (
                0,
                28,
                "ncclDevKernel_AllReduce_Sum_f32(ncclDevComm*)",
                200,
                240,
                "communication",
                "dp_collective",
            ),
            (0, 29, "Memcpy DtoD (Device -> Device)", 90, 95, "memory", None),
        ]
    )

    waited = p2p_waits(activities)
    overlap = {row["comm_class"]: row for row in comm_overlap(waited).to_dicts()}
    streams = stream_activity(waited)
    breakdown = gpu_breakdown(waited).row(0, named=True)

    assert (overlap["ep_dispatch"]["overlap_ns"], overlap["ep_dispatch"]["exposed_ns"]) == (50, 50)
    assert (overlap["dp_collective"]["overlap_pct"], overlap["dp_collective"]["exposed_ns"]) == (0.0, 40)
    assert (overlap["all"]["comm_ns"], overlap["all"]["overlap_ns"], overlap["all"]["exposed_ns"]) == (
        140,
        50,
        90,
    )
    assert streams["busy_ns"].to_list() == [100, 100, 40, 5]
    assert (breakdown["busy_ns"], breakdown["idle_ns"], breakdown["memory_ns"]) == (190, 50, 5)


def _nearest_by_definition(
    activities: pl.DataFrame,
) -> dict[tuple[int, int, int], tuple[int | None, int | None]]:
    """(rank, stream, start) -> (wait, peer) of each p2p kernel, straight from ``p2p_waits``' definition."""
    kernels = [
        {**row, "index": index}
        for index, row in enumerate(activities.filter(pl.col("comm_class") == "p2p").to_dicts())
    ]
    found = {}
    for mine in kernels:
        others = [other for other in kernels if other["rank"] != mine["rank"]]
        wait = peer = None
        if others:
            # nearest end; equal distance: the later end; same end: the highest rank's last kernel
            best = min(
                others,
                key=lambda o: (abs(o["end_ns"] - mine["end_ns"]), -o["end_ns"], -o["rank"], -o["index"]),
            )
            if best["start_ns"] < mine["end_ns"] and best["end_ns"] > mine["start_ns"]:
                duration = mine["end_ns"] - mine["start_ns"]
                wait, peer = min(max(best["start_ns"] - mine["start_ns"], 0), duration), best["rank"]
        found[(mine["rank"], mine["stream"], mine["start_ns"])] = (wait, peer)
    return found


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 60), st.integers(1, 30)),
        min_size=1,
        max_size=40,
        unique_by=lambda kernel: (kernel[0], kernel[1], kernel[2]),
    )
)
def test_p2p_peers_in_one_pass_match_the_definition(kernels: list[tuple[int, int, int, int]]) -> None:
    # Few ranks, streams and times: many equal ends and ties, the cases a single pass can get wrong.
    activities = _activities(
        [
            (rank, stream, SENDRECV, start, start + length, "communication", "p2p")
            for rank, stream, start, length in kernels
        ]
        + [(0, 99, GEMM, 0, 5, "compute", None)]
    )

    waited = p2p_waits(activities)

    got = {
        (row["rank"], row["stream"], row["start_ns"]): (row["wait_ns"], row["peer_rank"])
        for row in waited.filter(pl.col("comm_class") == "p2p").to_dicts()
    }
    assert got == _nearest_by_definition(activities)
    assert waited.height == activities.height
    assert waited.filter(pl.col("comm_class").is_null())["wait_ns"].to_list() == [0]
