"""Clock alignment recovers known per-rank and per-host shifts, from simulated and captured runs."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from whatif.simulated_runs import simulated_actions

from tracekit.run_analysis import realized_actions
from tracekit.run_analysis import analyse
from tracekit.trace.run import load_run
from tracekit.analysis.clock import apply_offsets, estimate_offsets

SHIFTS_NS = {0: 0, 1: 40_000_000, 2: -25_000_000, 3: 7_000_000}
"""Known clock errors: rank r's timestamps read SHIFTS_NS[r] late."""

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.mark.parametrize("name", ["1f1b", "interleaved-1f1b", "zbv", "dualpipev", "dualpipe"])
def test_per_rank_shifts_are_recovered_exactly_when_latency_is_symmetric(name: str) -> None:
    actions = simulated_actions(name, comm_ms=0.25)

    alignment = estimate_offsets(apply_offsets(actions, SHIFTS_NS))

    assert alignment.rank_offset_ns == pytest.approx({r: -s for r, s in SHIFTS_NS.items()}, abs=2)
    assert alignment.violations == 0 and alignment.unresolved_hosts == ()


def test_ranks_of_one_host_share_one_offset() -> None:
    hosts = {0: "a", 1: "a", 2: "b", 3: "b"}
    host_shift = {0: 0, 1: 0, 2: 30_000_000, 3: 30_000_000}

    alignment = estimate_offsets(apply_offsets(simulated_actions("1f1b", comm_ms=0.25), host_shift), hosts)

    assert alignment.offsets.rows() == [("a", "0,1", 0), ("b", "2,3", -30_000_000)]
    assert alignment.violations == 0


@pytest.mark.parametrize("hosts", [{0: "a", 1: "a", 2: "a", 3: "a"}, {0: "a", 1: "b", 2: "a", 3: "b"}])
def test_ranks_said_to_share_a_clock_that_do_not_leave_violations(hosts: dict[int, str]) -> None:
    alignment = estimate_offsets(apply_offsets(simulated_actions("1f1b", comm_ms=0.25), SHIFTS_NS), hosts)

    assert alignment.violations > 0 and alignment.worst_violation_ns > 1_000_000
    assert alignment.dependencies == 2 * 8 * 6  # steps x micro-batches x (3 forward + 3 backward hops)


def test_captured_run_shifted_in_memory_is_realigned_within_its_bounds() -> None:
    actions = realized_actions(load_run(SAMPLES / "1f1b"))
    baseline = estimate_offsets(actions)

    shifted = estimate_offsets(apply_offsets(actions, SHIFTS_NS))

    for rank, shift in SHIFTS_NS.items():
        assert shifted.rank_offset_ns[rank] == pytest.approx(baseline.rank_offset_ns[rank] - shift, abs=2)
        assert abs(shifted.rank_offset_ns[rank] + shift) < 2_000_000  # one host: the true offset is 0
    truth = {f"rank{r}": -s for r, s in SHIFTS_NS.items()}
    for a, b, lower, upper in shifted.bounds.iter_rows():
        assert lower <= truth[b] - truth[a] <= upper


def _shift_trace_file(path: Path, shift_ns: int) -> None:
    document = json.loads(gzip.decompress(path.read_bytes()))
    for event in document["traceEvents"]:
        if "ts" in event:
            event["ts"] = event["ts"] + shift_ns / 1000
    path.write_bytes(gzip.compress(json.dumps(document).encode()))


def test_captured_run_with_shifted_trace_files_on_separate_hosts_is_realigned(tmp_path: Path) -> None:
    root = tmp_path / "shifted"
    root.mkdir()
    for path in (SAMPLES / "1f1b").glob("rank*.json.gz"):
        shutil.copy(path, root / path.name)
    manifest = json.loads((SAMPLES / "1f1b" / "run.json").read_text())
    for entry in manifest["ranks"]:
        entry["host"] = f"host{entry['rank']}"
        _shift_trace_file(root / f"rank{entry['rank']}.json.gz", SHIFTS_NS[entry["rank"]])
    (root / "run.json").write_text(json.dumps(manifest))
    original = analyse(SAMPLES / "1f1b")

    shifted = analyse(root)

    alignment = shifted.realized.alignment
    assert alignment is not None and alignment.violations == 0
    for rank, shift in SHIFTS_NS.items():
        assert abs(alignment.rank_offset_ns[rank] + shift) < 2_000_000
    assert shifted.case.measured_ms() == pytest.approx(original.case.measured_ms(), abs=2.0)
    assert shifted.case.ops["duration_ms"].to_list() == pytest.approx(
        original.case.ops["duration_ms"].to_list()
    )
    assert not pl.DataFrame(shifted.actions).is_empty()
