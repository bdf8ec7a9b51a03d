"""A later mistake never destroys a capture, a dying rank loses only itself, and every cause is
named as such: no space left, an unwritable folder, a killed rank, a library version that differs."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from record_runs import TRACEKIT, digests, example_job, fill, manifest, record_args, run, stray_files

from collectors.launch import NOTHING_CAPTURED_EXIT, remove_strays
from collectors.merge import build_manifest

pytestmark = pytest.mark.slow

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
NEWER_DUALPIPE = Path(__file__).resolve().parent / "newer_dualpipe"
JOBS_FAILURE = (
    "the command failed (exit status {status}) and tracekit's collector reported no fault in any rank"
)


def test_a_command_that_cannot_start_leaves_the_earlier_capture(earlier: Path) -> None:
    before = digests(earlier)

    done = run([*TRACEKIT, "record", "--out", str(earlier), "--", "/nonexistent-cmd"])

    assert done.returncode == 2 and "cannot run '/nonexistent-cmd'" in done.stderr
    assert "removed" not in done.stderr
    assert digests(earlier) == before and sorted(p.name for p in earlier.iterdir()) == sorted(before)


def test_a_job_that_ends_before_the_window_leaves_the_earlier_capture(earlier: Path) -> None:
    before = digests(earlier)

    done = run(record_args(earlier, [sys.executable, "-c", "import sys; sys.exit(3)"]))

    assert done.returncode == 3
    assert "the earlier capture in" in done.stderr and "is left as it was" in done.stderr
    assert JOBS_FAILURE.format(status=3) in done.stderr, done.stderr[-3000:]
    assert digests(earlier) == before


def test_a_new_capture_moves_the_earlier_one_aside_intact(earlier: Path) -> None:
    before = digests(earlier)

    done = run(record_args(earlier, example_job("1f1b", ranks=2)))

    assert done.returncode == 0, done.stderr[-3000:]
    written = manifest(earlier)
    aside = earlier / written["earlier_capture"]
    assert re.fullmatch(r"earlier-\d{8}T\d{6}Z", aside.name)
    assert digests(aside) == before
    assert written["complete"] and written["world_size"] == 2
    assert sorted(p.name for p in earlier.iterdir() if p.is_file()) == [
        "rank0.json.gz", "rank0.meta.json", "rank0.probes.jsonl.gz",
        "rank1.json.gz", "rank1.meta.json", "rank1.probes.jsonl.gz", "run.json",
    ]  # fmt: skip
    assert f"moved the earlier capture in {earlier} to {aside}" in done.stderr


def test_a_rank_killed_in_the_window_loses_only_itself(tmp_path: Path) -> None:
    job = example_job("1f1b", "--crash-rank", "2", "--crash-step", "1", ranks=4)

    done = run(record_args(tmp_path, job))

    assert done.returncode == 1, done.stderr[-3000:]
    # One line says the failure is the job's, after the job's own message naming the dead rank.
    assert done.stderr.count(JOBS_FAILURE.format(status=1)) == 1, done.stderr[-3000:]
    assert done.stderr.index("pipeline_job: rank 2 exited") < done.stderr.index(JOBS_FAILURE.format(status=1))
    written = manifest(tmp_path)
    assert written["exit_code"] == 1 and written["world_size"] == 4 and not written["complete"]
    dead = written["ranks"][2]
    assert (dead["status"], dead["trace"]) == ("capturing", None)
    assert re.search(r"the rank \(pid \d+ on .+\) died during step #0 of the window", dead["problems"][0])
    assert "killed by a signal it could not catch" in dead["problems"][0]
    for rank in (0, 1, 3):
        entry = written["ranks"][rank]
        assert (entry["status"], entry["trace"]) == ("partial", f"rank{rank}.partial.json.gz"), entry
        assert (tmp_path / entry["trace"]).is_file()
    assert stray_files(tmp_path) == []


def test_a_rank_killed_after_writing_its_trace_keeps_it(tmp_path: Path) -> None:
    capture = tmp_path / "run"
    shutil.copytree(SAMPLES / "1f1b", capture, ignore=shutil.ignore_patterns(".tracekit-cache"))
    (capture / "run.json").unlink()
    sidecar = capture / "rank2.meta.json"
    meta = json.loads(sidecar.read_text())
    # What the disk holds when rank 2 is killed between its trace's rename and its sidecar's:
    # the sidecar of the open window, and the temporary file of the interrupted sidecar write.
    sidecar.write_text(json.dumps({**meta, "status": "capturing", "trace": None}))
    (capture / f".rank2.meta.json.{meta['pid']}-0badc0de.tmp").write_text('{"format": ')

    removed = remove_strays(capture)
    entry = build_manifest(capture).ranks[2]

    assert removed == [f".rank2.meta.json.{meta['pid']}-0badc0de.tmp"]
    assert (entry.complete, entry.trace, entry.status) == (True, "rank2.json.gz", "complete")
    assert "died after writing rank2.json.gz" in entry.problems[0]
    assert stray_files(capture) == []


def test_a_full_disk_is_named_and_leaves_no_temporary_files(tmpfs: Callable[..., Path]) -> None:
    disk = tmpfs(200)
    out = disk / "run"

    done = run(record_args(out, example_job("1f1b", ranks=2)))

    traces = {path.name for path in out.glob("rank*.json.gz")}
    # The job succeeds either way; with no trace written, record says nothing was captured (docs/labels.md).
    assert done.returncode == (0 if traces else NOTHING_CAPTURED_EXIT), done.stderr[-3000:]
    assert "died or was killed" not in done.stderr and "No such file" not in done.stderr
    assert "no pipeline schedule tracekit recognizes" not in done.stderr + done.stdout
    ranks_out_of_space = set(re.findall(r"tracekit: rank (\d+): cannot write \S+: no space left on device", done.stderr))
    for rank in (0, 1):
        assert str(rank) in ranks_out_of_space or f"rank{rank}.json.gz" in traces, done.stderr[-3000:]
    assert ranks_out_of_space, "200 KB should not hold two traces"
    assert stray_files(disk) == []


def test_a_disk_full_from_the_start_runs_the_job_and_says_why(tmpfs: Callable[..., Path]) -> None:
    disk = tmpfs(64)
    fill(disk)

    done = run(record_args(disk / "run", [sys.executable, "-c", "print('trained')"]))

    assert done.returncode == 0 and "trained" in done.stdout
    assert "no space left on device); running the command without capture" in done.stderr
    assert stray_files(disk) == []


@pytest.mark.parametrize("kind", ["under-a-file", "read-only"])
def test_an_unwritable_folder_runs_the_job_without_capture(
    tmp_path: Path, tmpfs: Callable[..., Path], kind: str
) -> None:
    if kind == "under-a-file":
        (tmp_path / "a-file").write_text("")
        out, fault = tmp_path / "a-file" / "run", "a parent of it is not a directory"
    else:
        out, fault = tmpfs(64, read_only=True) / "run", "read-only file system"
    job = [sys.executable, "-c", "import os; print('trained, TRACEKIT_OUT =', os.environ.get('TRACEKIT_OUT'))"]

    done = run(record_args(out, job))

    assert done.returncode == 0 and "trained, TRACEKIT_OUT = None" in done.stdout
    assert done.stderr.count(f"tracekit: cannot write to {out} ({fault})") == 1, done.stderr


def test_a_newer_library_version_is_never_raised_into_the_job(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(NEWER_DUALPIPE), os.environ.get("PYTHONPATH", "")])}

    done = run(record_args(tmp_path, [sys.executable, str(NEWER_DUALPIPE / "train.py")]), env=env)

    assert done.returncode == 0 and "trained 4 steps" in done.stdout, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    written = manifest(tmp_path)
    assert written["complete"] and written["ranks"][0]["trace"] == "rank0.json.gz"
    problems = written["collector_problems"]
    assert any("labelling of DualPipe._forward_compute_chunk switched off: TypeError" in p for p in problems)
    assert any("labelling of DualPipe._backward_compute_chunk switched off: AttributeError" in p for p in problems)
    assert any("DualPipe has no _weight_chunk" in p for p in problems)
    assert all(p.startswith("rank 0: ") for p in problems)
    for problem in problems:
        assert f"warning: {problem}" in done.stderr
