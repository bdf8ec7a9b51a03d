"""The host's part of a step change: each run's wait for a core, from the collector's probes window."""

from __future__ import annotations

import gzip
import json
import shutil
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tracekit
from collectors.probes import COLUMNS, PROBES_FORMAT, ProbeBuffer
from tracekit.changes.host import HostChange, host_change, host_wait_ms
from tracekit.changes.steps import step_change
from tracekit.present.diff import diff_payload, diff_result, gate_line, headline
from tracekit.trace.probes import WINDOW_SCHEMA, read_probes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _window(runq_ms: list[float | None], wall_ms: list[float | None]) -> pl.DataFrame:
    rows = [(rank, runq, 10, wall) for rank, (runq, wall) in enumerate(zip(runq_ms, wall_ms))]
    return pl.DataFrame(rows, schema=WINDOW_SCHEMA, orient="row")


def test_the_host_wait_is_the_median_ranks_share_of_the_window_times_the_step() -> None:
    window = _window([10.0, 20.0, 30.0, 90.0], [100.0, 100.0, 100.0, 100.0])
    assert host_wait_ms(window, 50.0) == pytest.approx(0.25 * 50.0)  # shares 0.1, 0.2, 0.3, 0.9
    assert host_wait_ms(_window([10.0, None], [100.0, 100.0]), 50.0) == pytest.approx(5.0)
    # Files written before the collector recorded the window's wall time (it also ran on through the
    # export), or without run-queue wait: unknown, never a guess.
    assert host_wait_ms(_window([10.0, 20.0], [None, None]), 50.0) is None
    assert host_wait_ms(_window([None, None], [100.0, 100.0]), 50.0) is None
    assert host_change(3.0, None) is None and host_change(None, 3.0) is None


def test_a_change_is_the_hosts_only_when_what_is_left_of_it_is_within_the_band() -> None:
    base, new = np.full(5, 100.0) + np.arange(5), np.full(5, 160.0) + np.arange(5)
    change = step_change(base, new)  # +60 ms, beyond a band of about 5 ms
    assert change.beyond_noise
    assert HostChange(base_ms=10.0, new_ms=68.0).accounts_for(change)  # 60 - 58 = 2: within
    assert not HostChange(base_ms=10.0, new_ms=30.0).accounts_for(change)  # 40 left
    assert not HostChange(base_ms=68.0, new_ms=10.0).accounts_for(change)  # the other way
    within = step_change(base, base + 1.0)
    assert not within.beyond_noise and not HostChange(base_ms=0.0, new_ms=1.0).accounts_for(within)


def _with_probes(run: Path, share: float) -> None:
    """Give every rank of ``run`` a probes file whose window spent ``share`` of its wall off a core."""
    for meta in sorted(run.glob("rank*.meta.json")):
        rank = int(meta.name.removeprefix("rank").split(".")[0])
        header = {"format": PROBES_FORMAT, "rank": rank, "columns": list(COLUMNS), "actions": 0,
                  "runq_available": True, "window_runq_ns": int(share * 1e9), "window_dispatches": 100,
                  "window_wall_ns": 10**9, "gc_pauses": 0, "gc_ns": 0, "nvml": [], "notes": []}  # fmt: skip
        with gzip.open(run / f"rank{rank}.probes.jsonl.gz", "wt") as handle:
            handle.write(json.dumps(header) + "\n")


@pytest.fixture(scope="module")
def busy_host(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sample straggler run against the clean one, NEW's ranks off a core as long as it is slower."""
    root = tmp_path_factory.mktemp("host")
    base, new = root / "base", root / "new"
    shutil.copytree(SAMPLES / "dualpipev", base)
    shutil.copytree(SAMPLES / "dualpipev-straggler", new)
    steps = tracekit.diff(base, new).step_change
    _with_probes(base, 0.05)
    _with_probes(new, (steps.change_ms + 0.05 * steps.base.median_ms) / steps.new.median_ms)
    return base, new


def test_a_change_the_hosts_wait_accounts_for_is_laid_on_the_host(busy_host: tuple[Path, Path]) -> None:
    result = tracekit.diff(*busy_host)
    assert result.host is not None and result.host.accounts_for(result.step_change)
    assert result.host.change_ms == pytest.approx(result.step_change.change_ms)
    sentence = headline(result)
    assert sentence.startswith("NEW is") and "the host's, not the job's" in sentence
    assert "explains" not in sentence  # no group or link is blamed for the host's change
    failed, line = gate_line(result, 10)
    assert not failed and line.startswith("no regression") and "the host's" in line
    payload = diff_payload(result, 10)
    assert payload["host"]["accounts_for_change"] is True and payload["gate"]["failed"] is False
    steps = next(table for table in diff_result(result).tables if table.name == "steps").frame
    assert steps["host_wait_ms"].to_list() == pytest.approx([result.host.base_ms, result.host.new_ms])


def test_without_probes_the_host_is_unknown_and_the_change_is_the_jobs() -> None:
    result = tracekit.diff(SAMPLES / "dualpipev", SAMPLES / "dualpipev-straggler")
    assert result.host is None
    assert "explains" in headline(result) and gate_line(result, 10)[0]
    assert diff_payload(result)["host"] is None


def test_the_window_is_taken_as_it_closes_not_after_the_export() -> None:
    buffer = ProbeBuffer()
    try:
        buffer.close_window()
        time.sleep(0.05)  # the export's time: not the window's
        header = buffer.header(0)
        assert 0 < header["window_wall_ns"] < 50_000_000
        assert header == buffer.header(0)  # closed once: the same figures however late the header
    finally:
        buffer.close()


def test_probes_written_before_the_wall_time_read_it_as_unknown(tmp_path: Path) -> None:
    header = {"format": PROBES_FORMAT, "rank": 0, "columns": list(COLUMNS), "actions": 0,
              "runq_available": True, "window_runq_ns": 5_000_000, "window_dispatches": 3, "nvml": [],
              "notes": []}  # fmt: skip
    with gzip.open(tmp_path / "rank0.probes.jsonl.gz", "wt") as handle:
        handle.write(json.dumps(header) + "\n")
    probes = read_probes(tmp_path, (0,))
    assert probes is not None
    assert probes.window.row(0, named=True) == {"rank": 0, "runq_ms": 5.0, "dispatches": 3, "wall_ms": None}
