"""The kernel-class table: built-in rows on real kernel names, user extensions, bad configuration."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.errors import TracekitError
from tracekit.gpu.kernel_classes import KERNEL_PATTERNS, classify, load_patterns
from tracekit.gpu.timeline import gpu_timeline
from tracekit.trace.kineto import read_trace


@pytest.mark.parametrize(
    ("cat", "name", "kernel_class", "comm_class"),
    [
        (
            "kernel",
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "communication",
            "p2p",
        ),
        ("kernel", "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "communication", "p2p"),
        (
            "kernel",
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "communication",
            "dp_collective",
        ),
        (
            "kernel",
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "communication",
            "dp_collective",
        ),
        (
            "kernel",
            "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "communication",
            "dp_collective",
        ),
        (
            "kernel",
            "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "communication",
            "other_collective",
        ),
        (
            "kernel",
            "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
            "communication",
            "ep_dispatch",
        ),
        (
            "kernel",
            "void deep_ep::internode_ll::combine<false>(void*, void*, int*)",
            "communication",
            "ep_combine",
        ),
        (
            "kernel",
            "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)",
            "communication",
            "ep_dispatch",
        ),
        (
            "kernel",
            "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*)",
            "communication",
            "ep_dispatch",
        ),
        (
            "kernel",
            "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)",
            "communication",
            "ep_combine",
        ),
        (
            "kernel",
            "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*)",
            "communication",
            "ep_other",
        ),
        (
            "kernel",
            "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)",
            "compute",
            None,
        ),
        (
            "kernel",
            "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)",
            "compute",
            None,
        ),
        ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "memory", None),
        ("gpu_memset", "Memset (Device)", "memory", None),
        ("kernel", "volta_sgemm_128x32_nt", "compute", None),
        (
            "kernel",
            "void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128>>(Flash_fwd_params)",
            "compute",
            None,
        ),
    ],
)
def test_builtin_table(cat: str, name: str, kernel_class: str, comm_class: str | None) -> None:
    row = classify(pl.DataFrame({"cat": [cat], "name": [name]})).row(0, named=True)

    assert (row["kernel_class"], row["comm_class"]) == (kernel_class, comm_class)


def test_deepseek_trace_classes(deepseek_trace: Path) -> None:
    events, _ = read_trace(deepseek_trace)

    activities = gpu_timeline(events).activities

    comm = activities.filter(pl.col("kernel_class") == "communication")
    assert comm["stream"].unique().to_list() == [27]
    counts = dict(comm.group_by("comm_class").len().iter_rows())
    assert counts == {"ep_dispatch": 12, "ep_combine": 8, "ep_other": 12}
    assert activities.filter(pl.col("kernel_class") == "memory").height == 20


@pytest.mark.parametrize(
    ("file_name", "text"),
    [
        (
            "classes.toml",
            '[[kernel_class]]\npattern = "^my_a2a"\nclass = "communication"\ncomm_class = "ep_dispatch"\n',
        ),
        (
            "classes.yaml",
            "kernel_class:\n  - pattern: ^my_a2a\n    class: communication\n    comm_class: ep_dispatch\n",
        ),
    ],
)
def test_user_rows_come_first(tmp_path: Path, file_name: str, text: str) -> None:
    path = tmp_path / file_name
    path.write_text(text)

    patterns = load_patterns(path)
    rows = classify(
        pl.DataFrame({"cat": ["kernel", "kernel"], "name": ["my_a2a_kernel", "ncclDevKernel_AllGather"]}),
        patterns,
    )

    assert patterns[len(patterns) - len(KERNEL_PATTERNS) :] == KERNEL_PATTERNS
    assert rows["comm_class"].to_list() == ["ep_dispatch", "dp_collective"]


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ('[[kernel_class]]\npattern = "x"\nclass = "network"\n', "kernel class 'network'"),
        ('[[kernel_class]]\npattern = "x"\nclass = "communication"\n', "comm_class is required"),
        (
            '[[kernel_class]]\npattern = "x"\nclass = "compute"\ncomm_class = "p2p"\n',
            "comm_class is required",
        ),
        ('[[kernel_class]]\npattern = "(x"\nclass = "compute"\n', "not a regular expression"),
        ('[[kernel_class]]\npatern = "x"\nclass = "compute"\n', "needs `pattern` and `class`"),
        ("title = 1\n", "no `kernel_class` list"),
        ("[[kernel_class]\n", "not valid TOML"),
    ],
    ids=[
        "bad-class",
        "comm-without-subclass",
        "subclass-without-comm",
        "bad-regex",
        "typo",
        "empty",
        "bad-toml",
    ],
)
def test_bad_user_rows_name_the_file(tmp_path: Path, text: str, fault: str) -> None:
    path = tmp_path / "classes.toml"
    path.write_text(text)

    with pytest.raises(TracekitError) as raised:
        load_patterns(path)

    assert fault in str(raised.value) and str(raised.value).startswith(str(path))
