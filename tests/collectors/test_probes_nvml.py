"""NVML sampling in the collector's probes where no GPU is: absent, with a note, never an error.

This machine has no GPU: the samples themselves are tested with a stand-in NVML
(``tests/stragglers/test_stragglers_gpu_causes.py``); here the real libraries' refusals are.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from collectors import probes as collector_probes
from collectors.probes import ProbeBuffer
from tracekit.trace.probes import read_probes


def _written_header(tmp_path: Path) -> dict:
    buffer = ProbeBuffer()
    try:
        with buffer.span(0, 0, "F", 0):
            sum(range(1000))
        buffer.step_ended(0)
    finally:
        buffer.close()
    path = buffer.write(tmp_path, 0)
    with gzip.open(path, "rt") as handle:
        return json.loads(handle.readline())


def test_without_a_gpu_there_are_no_samples_and_a_note(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: its samples are not absent")

    header = _written_header(tmp_path)
    probes = read_probes(tmp_path, (0,))

    assert header["nvml"] == []
    assert "no GPU: no clock, power or temperature samples" in header["notes"]
    assert probes is not None and probes.nvml.is_empty()
    assert any("rank 0: no GPU" in note for note in probes.notes)


def test_nvml_that_does_not_start_leaves_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pynvml = pytest.importorskip("pynvml")  # nvidia-ml-py: imports without a GPU, nvmlInit fails
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML starts here: a GPU driver is present")
    except pynvml.NVMLError:
        pass
    monkeypatch.setattr(collector_probes, "_cuda_device", lambda: (0, None))  # as if torch saw a GPU

    header = _written_header(tmp_path)

    assert header["nvml"] == []
    assert any(note.startswith("NVML did not start: NVMLError") for note in header["notes"])


def test_without_nvidia_ml_py_the_note_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector_probes, "_cuda_device", lambda: (0, None))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError

    header = _written_header(tmp_path)

    assert header["nvml"] == []
    assert "nvidia-ml-py is not installed: no clock, power or temperature samples" in header["notes"]


def test_samples_written_before_the_power_limit_and_reasons_still_read(tmp_path: Path) -> None:
    from collectors.probes import COLUMNS, PROBES_FORMAT

    sample = {"step": 0, "unix_ns": 1, "sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980, "power_w": 500.0,
              "temperature_c": 60}  # fmt: skip
    header = {"format": PROBES_FORMAT, "rank": 0, "columns": list(COLUMNS), "actions": 0, "runq_available": True,
              "window_runq_ns": 0, "window_dispatches": 0, "nvml": [sample], "notes": []}  # fmt: skip
    with gzip.open(tmp_path / "rank0.probes.jsonl.gz", "wt") as handle:
        handle.write(json.dumps(header) + "\n")

    probes = read_probes(tmp_path, (0,))

    assert probes is not None
    assert probes.nvml.select("sm_clock_mhz", "power_limit_w", "clock_reasons").rows() == [
        (1980.0, None, None)
    ]
