"""Bad GPU input gives a clear warning or error, never a silently wrong number (edited real traces)."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.errors import TracekitError
from tracekit.gpu.analysis import analyse_gpu
from tracekit.gpu.timeline import gpu_timeline
from tracekit.trace.kineto import read_trace
from tracekit.trace.run import load_run

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _kernels(document: dict) -> list[dict]:
    return [event for event in document["traceEvents"] if event.get("cat") in GPU_CATS]


def test_trace_without_gpu_events_is_an_error(edited_deepseek) -> None:
    def drop_gpu(document: dict) -> None:
        document["traceEvents"] = [e for e in document["traceEvents"] if e.get("cat") not in GPU_CATS]

    run = load_run(edited_deepseek(drop_gpu).parent, workers=1)

    with pytest.raises(TracekitError, match="no GPU events"):
        analyse_gpu(run)


def test_comm_looking_kernel_without_a_row_is_warned(edited_deepseek) -> None:
    def rename(document: dict) -> None:
        for event in _kernels(document):
            if "dpsk::ep::internode::" in event["name"]:
                event["name"] = event["name"].replace("dpsk::ep::internode::", "myep_alltoall_")

    events, _ = read_trace(edited_deepseek(rename))
    timeline = gpu_timeline(events)

    assert timeline.activities.filter(pl.col("kernel_class") == "communication").height == 0
    assert any(
        "look like communication" in warning and "myep_alltoall_" in warning for warning in timeline.warnings
    )


def test_missing_correlation_is_recovered_from_flows_or_warned(edited_deepseek) -> None:
    def strip(document: dict) -> None:
        for event in _kernels(document):
            del event["args"]["correlation"]

    def strip_and_unflow(document: dict) -> None:
        strip(document)
        document["traceEvents"] = [e for e in document["traceEvents"] if e.get("cat") != "ac2g"]

    recovered, recovered_info = read_trace(edited_deepseek(strip, "rank0.json"))
    lost, lost_info = read_trace(edited_deepseek(strip_and_unflow, "rank1.json"))

    original, _ = read_trace(edited_deepseek(lambda document: None, "rank2.json"))
    gpu = pl.col("cat").is_in(GPU_CATS)
    # The trace draws an ac2g arrow to each of its 983 GPU events: all get their correlation back, exactly.
    assert (
        recovered.filter(gpu).sort("start_ns", "name").equals(original.filter(gpu).sort("start_ns", "name"))
    )
    assert recovered_info.warnings == ()
    assert lost.filter(gpu)["correlation"].null_count() == lost.filter(gpu).height == 983
    assert any("983 GPU events have no correlation id and no ac2g flow" in w for w in lost_info.warnings)


def test_overlapping_kernels_on_one_stream_are_warned(edited_deepseek) -> None:
    def stretch(document: dict) -> None:
        kernels = sorted((e for e in _kernels(document) if e["tid"] == 7), key=lambda e: e["ts"])
        kernels[10]["dur"] = kernels[11]["ts"] - kernels[10]["ts"] + 50  # runs 50 µs into the next one

    events, _ = read_trace(edited_deepseek(stretch))

    warnings = gpu_timeline(events).warnings
    # It now overlaps the two kernels that start within its new end.
    assert any(
        "stream 7: 2 activities start before the previous one" in w and "worst 50.0 µs" in w for w in warnings
    )


def test_negative_durations_are_skipped_loudly(edited_deepseek) -> None:
    def negate(document: dict) -> None:
        _kernels(document)[0]["dur"] = -5

    events, info = read_trace(edited_deepseek(negate))

    assert events.filter(pl.col("cat").is_in(GPU_CATS)).height == 982
    assert any("1 events with a negative duration were skipped" in warning for warning in info.warnings)


def _scale_to_ns(document: dict) -> None:
    for event in document["traceEvents"]:
        for key in ("ts", "dur"):
            if isinstance(event.get(key), (int, float)):
                event[key] = event[key] * 1000
    document["displayTimeUnit"] = "ns"


@pytest.mark.parametrize(
    ("edit", "fault"),
    [
        (_scale_to_ns, "look like nanoseconds"),
        (lambda document: document.update(baseTimeNanoseconds=1_740_461_679_000_000_000), "already absolute"),
        (lambda document: document.update(displayTimeUnit="s"), "unknown displayTimeUnit"),
    ],
    ids=["ns-timestamps", "base-added-twice", "bad-display-unit"],
)
def test_wrong_time_units_are_errors(edited_deepseek, edit, fault: str) -> None:
    path = edited_deepseek(edit)

    with pytest.raises(TracekitError) as raised:
        read_trace(path)

    assert fault in str(raised.value) and str(raised.value).startswith(str(path))


def test_display_unit_ns_with_us_values_is_a_warning(edited_deepseek) -> None:
    events, info = read_trace(edited_deepseek(lambda document: document.update(displayTimeUnit="ns")))

    reference, _ = read_trace(edited_deepseek(lambda document: None, "rank1.json"))
    assert events["start_ns"].equals(reference["start_ns"])
    assert any("displayTimeUnit 'ns'" in warning for warning in info.warnings)
