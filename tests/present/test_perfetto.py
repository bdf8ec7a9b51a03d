"""``tracekit export --perfetto`` on real captures: read back, flows, critical path, ideal, structure."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from tests.present.chrome_trace_rules import violations
from tracekit.present.perfetto import IDEAL_PID_BASE, PerfettoOptions, build_export
from tracekit.run_analysis import RunAnalysis, analyse
from tracekit.trace.kineto import read_trace
from tracekit.trace.labels import Role, match_labels

REPO = Path(__file__).resolve().parents[2]
STRAGGLER_RUN = REPO / "sample_traces" / "dualpipev-straggler"
ACTION_KEY = ["stage", "kind", "microbatch", "start_ns", "end_ns"]


def tracekit(*args: str) -> subprocess.CompletedProcess[str]:
    """The command line in a child process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, timeout=300, check=False
    )


def load(path: Path) -> dict[str, Any]:
    return orjson.loads(gzip.decompress(path.read_bytes()))


@pytest.fixture(scope="module")
def run_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the bundled DualPipeV capture whose rank 2 is slow (4 ranks, 2 steps, F&B pairs)."""
    root = tmp_path_factory.mktemp("straggler") / "run"
    shutil.copytree(STRAGGLER_RUN, root, ignore=shutil.ignore_patterns(".tracekit-cache"))
    return root


@pytest.fixture(scope="module")
def analysis(run_copy: Path) -> RunAnalysis:
    return analyse(run_copy)


@pytest.fixture(scope="module")
def exported(
    run_copy: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    # tracekit's reader takes a rank from the trace or its file name: the name gives it one, and
    # the export's pid is each event's rank.
    out = tmp_path_factory.mktemp("export") / "all-ranks-rank0.json.gz"
    return out, tracekit("export", str(run_copy), "--perfetto", str(out))


def events_of(exported: tuple[Path, subprocess.CompletedProcess[str]]) -> list[dict[str, Any]]:
    path, result = exported
    assert result.returncode == 0, result.stderr
    return load(path)["traceEvents"]


def test_the_export_reads_back_through_the_kineto_reader_with_the_same_actions_per_rank(
    exported: tuple[Path, subprocess.CompletedProcess[str]], analysis: RunAnalysis
) -> None:
    path, result = exported
    assert result.returncode == 0, result.stderr

    events, _info = read_trace(path)
    labelled = match_labels(
        events.filter((pl.col("cat") == "user_annotation") & (pl.col("pid") < IDEAL_PID_BASE))
    )
    read_back = labelled.filter(pl.col("role") == Role.ACTION.value).select(
        "pid",
        "stage",
        "kind",
        "microbatch",
        "start_ns",
        pl.col("start_ns").add(pl.col("dur_ns")).alias("end_ns"),
    )

    expected = analysis.actions
    assert sorted(read_back["pid"].unique().to_list()) == sorted(expected["rank"].unique().to_list())
    for rank in expected["rank"].unique().to_list():
        got = read_back.filter(pl.col("pid") == rank).select(ACTION_KEY).sort(ACTION_KEY)
        want = expected.filter(pl.col("rank") == rank).select(ACTION_KEY).sort(ACTION_KEY)
        assert got.equals(want), rank


def test_the_size_estimate_is_printed_before_writing_and_near_the_file(
    exported: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    path, result = exported
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stderr.splitlines() if line.startswith("tracekit: writing"))
    assert "events" in line and "gzipped" in line
    written = path.stat().st_size
    estimated_kb = float(line.split(" of JSON, ")[1].split(" kB")[0])
    assert 0.7 * written < estimated_kb * 1e3 < 1.3 * written


def test_the_trace_keeps_the_format_rules(exported: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    assert violations(events_of(exported)) == []


def test_every_cross_rank_dependency_is_an_arrow_between_existing_actions(
    exported: tuple[Path, subprocess.CompletedProcess[str]], analysis: RunAnalysis
) -> None:
    events = events_of(exported)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    actions = [e for e in events if e["ph"] == "X" and e["cat"] == "user_annotation"]

    def action_at(point: dict[str, Any]) -> dict[str, Any]:
        (hit,) = {
            (a["ts"], a["dur"]): a
            for a in actions
            if a["pid"] == point["pid"] and a["ts"] <= point["ts"] < a["ts"] + a["dur"]
        }.values()
        return hit

    assert set(starts) == set(ends) and len(starts) == analysis.dependencies.height
    for flow_id, start in starts.items():
        producer, consumer = action_at(start), action_at(ends[flow_id])
        assert producer["pid"] != consumer["pid"]
        assert producer["args"]["step"] == consumer["args"]["step"]
        # the consumer waited: it starts no earlier than the producer ended (one host: no correction)
        assert consumer["ts"] >= producer["ts"] + producer["dur"] - 0.0015


def test_the_critical_path_of_each_step_is_marked_on_its_actions(
    exported: tuple[Path, subprocess.CompletedProcess[str]], analysis: RunAnalysis
) -> None:
    events = events_of(exported)
    marked = Counter(
        (e["args"]["step"], e["args"]["critical_position"])
        for e in events
        if e["ph"] == "X" and e["cat"] == "user_annotation" and e["args"]["critical_path"]
    )
    track = [e for e in events if e["ph"] == "X" and e["cat"] == "tracekit.critical"]

    path = analysis.critical_path
    assert {key for key in marked} == {(s, p) for s, p in path.select("step", "position").iter_rows()}
    # an overlapped F&B node is two actions; every other node one
    pairs = path.filter(pl.col("optype") == "F&B").height
    assert sum(marked.values()) == path.height + pairs == len(track)
    on_path = path.select("step", "position", "rank").rows()
    assert {(e["args"]["step"], e["args"]["critical_position"], e["pid"]) for e in track} == set(on_path)


def test_the_straggler_and_its_price_sit_on_its_rank(
    exported: tuple[Path, subprocess.CompletedProcess[str]], analysis: RunAnalysis
) -> None:
    events = events_of(exported)
    notes = [e for e in events if e["ph"] == "X" and e["cat"] == "tracekit.straggler"]
    flagged = analysis.stragglers.flagged
    assert flagged.height >= 1
    assert sorted(e["pid"] for e in notes) == sorted(flagged["rank"].to_list())
    for note in notes:
        row = flagged.filter(pl.col("rank") == note["pid"]).row(0, named=True)
        assert note["args"]["saving_ms"] == pytest.approx(row["saving_ms"])
        assert f"saves {row['saving_ms']:.1f} ms" in note["name"]


def test_the_ideal_timeline_is_the_ideal_replay_beside_each_rank(
    exported: tuple[Path, subprocess.CompletedProcess[str]], analysis: RunAnalysis
) -> None:
    events = events_of(exported)
    ideal = [e for e in events if e["ph"] == "X" and e["cat"] == "tracekit.ideal"]
    assert {e["pid"] - IDEAL_PID_BASE for e in ideal} == set(analysis.actions["rank"].to_list())
    assert len(ideal) == analysis.actions.height
    starts = analysis.actions.group_by("step").agg(pl.col("start_ns").min()).rows()
    base_ns = load(exported[0])["baseTimeNanoseconds"]
    for step, start_ns in starts:
        makespan_us = (
            max(e["ts"] + e["dur"] for e in ideal if e["args"]["step"] == step) - (start_ns - base_ns) / 1e3
        )
        index = analysis.whatif.steps.index(step)
        assert makespan_us / 1e3 == pytest.approx(analysis.whatif.ideal_ms[index], rel=1e-6)


def test_slices_count_what_the_analysis_holds(
    exported: tuple[Path, subprocess.CompletedProcess[str]], analysis: RunAnalysis
) -> None:
    counts = Counter(e["cat"] for e in events_of(exported) if e["ph"] == "X")
    marked = analysis.marked_actions
    assert counts == {
        "user_annotation": analysis.actions.height,
        "tracekit.critical": marked["critical_position"].is_not_null().sum(),
        "tracekit.ideal": analysis.actions.height,
        "tracekit.straggler": analysis.stragglers.flagged.height,
    }


def test_steps_pick_what_is_exported(analysis: RunAnalysis) -> None:
    export = build_export(analysis, PerfettoOptions(steps=(1,), ideal=False))
    events = orjson.loads(b"".join(export.parts()))["traceEvents"]
    actions = [e for e in events if e["ph"] == "X" and e["cat"] == "user_annotation"]
    assert {e["args"]["step"] for e in actions} == {1}
    assert len(actions) == analysis.actions.filter(pl.col("step") == 1).height
    assert not any(e["cat"] == "tracekit.ideal" for e in events if e["ph"] == "X")
    assert violations(events) == []


def test_a_step_the_run_lacks_is_one_line_naming_the_run(run_copy: Path, tmp_path: Path) -> None:
    result = tracekit("export", str(run_copy), "--perfetto", str(tmp_path / "x.json.gz"), "--steps", "7")

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"tracekit: error: {run_copy}: no step 7 in this run (steps: 0, 1)"
    ]
    assert not (tmp_path / "x.json.gz").exists()


@pytest.mark.parametrize("bad", ["x", "3-", ""])
def test_a_malformed_step_list_is_refused(run_copy: Path, tmp_path: Path, bad: str) -> None:
    result = tracekit("export", str(run_copy), "--perfetto", str(tmp_path / "x.json.gz"), "--steps", bad)

    assert result.returncode == 2 and "--steps" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("trace", ["hta-sampled-2rank", "param-dlrm-8rank", "deepseek-v3-dualpipe-chunk"])
def test_real_gpu_traces_export_their_streams(shared: Path, tmp_path: Path, trace: str) -> None:
    root = tmp_path / trace
    shutil.copytree(shared / "traces" / trace, root)
    root.chmod(0o755)
    gpu = analyse(root)

    events = orjson.loads(b"".join(build_export(gpu, PerfettoOptions()).parts()))["traceEvents"]
    only_actions = orjson.loads(b"".join(build_export(gpu, PerfettoOptions(kernels=False)).parts()))[
        "traceEvents"
    ]

    kernels = [e for e in events if e["ph"] == "X"]
    expected = gpu.run.events.filter(pl.col("cat").is_in(["kernel", "gpu_memcpy", "gpu_memset"]))
    assert len(kernels) == expected.height > 0
    streams = {(e["pid"], e["args"]["stream"]) for e in kernels}
    assert streams == set(expected.select("rank", "stream").unique().rows())
    assert violations(events) == []
    assert not [e for e in only_actions if e["ph"] == "X"]


def test_rules_catch_a_broken_trace(exported: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    events = events_of(exported)
    flow = next(e for e in events if e["ph"] == "f")
    action = next(e for e in events if e["ph"] == "X" and e["cat"] == "user_annotation")
    broken = [
        *[e for e in events if e is not flow],
        {**flow, "ts": -5.0},
        {**action, "ts": action["ts"] + action["dur"] / 2},
    ]

    found = violations(broken)

    assert any("lies in no slice" in problem for problem in found)
    assert any("without nesting" in problem for problem in found)


@pytest.fixture(scope="module")
def labelled_gpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepSeek's real H800 trace with its chunk pair labelled as one rank's 0F0 then 0B0 (GPU work inside each)."""
    source = REPO.parent / "shared" / "traces" / "deepseek-v3-dualpipe-chunk" / "train.json.gz"
    if not source.is_file():
        pytest.skip(f"needs {source} (shared reference data beside the checkout), absent here")
    document = orjson.loads(gzip.decompress(source.read_bytes()))
    chunk = next(e for e in document["traceEvents"] if e.get("name") == "1F1B")
    half = chunk["dur"] / 2
    for name, ts in (("tracekit:0F0", chunk["ts"]), ("tracekit:0B0", chunk["ts"] + half)):
        label = {"ph": "X", "cat": "user_annotation", "name": name, "pid": chunk["pid"], "tid": chunk["tid"]}
        document["traceEvents"].append({**label, "ts": ts, "dur": half})
    root = tmp_path_factory.mktemp("gpu") / "run"
    root.mkdir()
    (root / "rank0.json.gz").write_bytes(gzip.compress(orjson.dumps(document)))
    return root


def test_a_labelled_gpu_run_exports_its_actions_on_the_gpu_clock_beside_their_kernels(labelled_gpu_run: Path) -> None:
    gpu = analyse(labelled_gpu_run)
    assert gpu.clock.value == "gpu"

    export = build_export(gpu, PerfettoOptions())
    document = orjson.loads(b"".join(export.parts()))
    events = document["traceEvents"]
    base_ns = document["baseTimeNanoseconds"]

    actions = sorted((e for e in events if e["ph"] == "X" and e["cat"] == "user_annotation"), key=lambda e: e["ts"])
    realized = gpu.actions.sort("start_ns")
    assert [a["name"] for a in actions] == ["tracekit:0F0", "tracekit:0B0"]
    for action, row in zip(actions, realized.iter_rows(named=True)):
        assert action["ts"] == pytest.approx((row["start_ns"] - base_ns) / 1e3, abs=1e-3)
        assert action["dur"] == pytest.approx((row["end_ns"] - row["start_ns"]) / 1e3, abs=1e-3)
    first, last = realized["start_ns"].min(), realized["end_ns"].max()
    kept = gpu.run.events.filter(
        pl.col("cat").is_in(["kernel", "gpu_memcpy", "gpu_memset"])
        & (pl.col("start_ns") < last)
        & (pl.col("start_ns") + pl.col("dur_ns") > first)
    )
    kernels = [e for e in events if e["ph"] == "X" and e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(kernels) == kept.height == sum(export.kernel_counts.values()) > 0
    assert {e["tid"] - 1000 for e in kernels} == set(kept["stream"].unique().to_list())
    # the actions span their GPU work: every kernel launched inside a label lies within its action
    assert min(e["ts"] for e in kernels) <= actions[0]["ts"] + 1e-3
    assert violations(events) == []
