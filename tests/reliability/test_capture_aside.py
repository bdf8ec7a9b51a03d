"""An earlier capture moves aside only once a new capture has written a trace, from ``record`` and
from the Python API alike; a folder holding traces of two runs is never declared complete and is
refused with one line naming each run's files, with or without sidecars and run.json."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from record_runs import TRACEKIT, digests, example_job, manifest, record_args, run

from collectors.merge import write_manifest
from tracekit.errors import TracekitError
from tracekit.trace.run import load_run

pytestmark = pytest.mark.slow

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def test_a_capture_that_never_reaches_its_window_leaves_the_earlier_one(earlier: Path) -> None:
    before = digests(earlier)

    done = run(record_args(earlier, example_job("1f1b", ranks=2, microbatches=2), steps="100:102"))

    assert "is left as it was" in done.stderr, done.stderr[-3000:]
    assert digests(earlier) == before
    assert load_run(earlier, workers=1).world_size == 4


PYTHON_API_JOB = """
import sys, torch, collectors
with collectors.Capture(sys.argv[1], steps=range(1, 3), patch=False) as cap:
    for _ in range(int(sys.argv[2])):
        with cap.step():
            torch.ones(32, 32) @ torch.ones(32, 32)
if sys.argv[3] == "merge":
    collectors.write_manifest(sys.argv[1])
"""
"""A one-rank custom loop captured with ``collectors.Capture``, then merged with ``write_manifest``."""


def _python_api(out_dir: Path, steps: int, merge: bool = True) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-c", PYTHON_API_JOB, str(out_dir), str(steps), "merge" if merge else "-"]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_the_python_api_moves_an_earlier_capture_aside_intact(earlier: Path) -> None:
    before = digests(earlier)

    done = _python_api(earlier, steps=4)

    assert done.returncode == 0, done.stderr[-3000:]
    aside = [path for path in earlier.iterdir() if path.name.startswith("earlier-")]
    assert len(aside) == 1 and digests(aside[0]) == before
    written = manifest(earlier)
    assert (written["complete"], written["world_size"]) == (True, 1)
    assert sorted(path.name for path in earlier.iterdir() if path.is_file()) == [
        "rank0.json.gz", "rank0.meta.json", "rank0.probes.jsonl.gz", "run.json",
    ]  # fmt: skip  (the per-action probes move in with their trace)
    assert load_run(earlier, workers=1).world_size == 1


def test_the_python_api_leaves_the_earlier_capture_when_it_writes_no_trace(earlier: Path) -> None:
    before = digests(earlier)

    done = _python_api(earlier, steps=1, merge=False)  # the window starts at step 1: never reached

    assert done.returncode == 0, done.stderr[-3000:]
    assert {name: digest for name, digest in digests(earlier).items() if not name.startswith(".")} == before
    assert load_run(earlier, workers=1).world_size == 4


def _mixed(root: Path, sidecars: bool) -> Path:
    """Ranks 0-1 of the 1F1B capture and ranks 2-3 of the DualPipeV one, traces (and sidecars)."""
    root.mkdir()
    for rank, source in ((0, "1f1b"), (1, "1f1b"), (2, "dualpipev"), (3, "dualpipev")):
        names = [f"rank{rank}.json.gz"] + ([f"rank{rank}.meta.json"] if sidecars else [])
        for name in names:
            shutil.copy(SAMPLES / source / name, root / name)
    return root


def test_traces_of_two_runs_alone_are_refused_naming_each_runs_files(tmp_path: Path) -> None:
    root = _mixed(tmp_path / "mixed", sidecars=False)

    done = run([*TRACEKIT, "report", str(root)])

    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "two runs mixed" in done.stderr
    first, second = done.stderr.split(": run ", 1)[1].split("; ")
    assert "rank0.json.gz, rank1.json.gz" in first and "rank2.json.gz, rank3.json.gz" in second


def test_write_manifest_never_declares_a_mixed_folder_complete(tmp_path: Path) -> None:
    root = _mixed(tmp_path / "mixed", sidecars=True)

    written = write_manifest(root)

    assert written.complete is False
    assert written.problems[0].startswith(f"two runs mixed in {root}")
    assert json.loads((root / "run.json").read_text())["complete"] is False
    with pytest.raises(TracekitError, match="two runs mixed"):
        load_run(root, workers=1)


TWO_RANK_API_JOB = """
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp, collectors

def rank(r, out):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
    dist.init_process_group("gloo", rank=r, world_size=2)
    with collectors.Capture(out, steps=range(1, 3), patch=False) as cap:
        for _ in range(4):
            with cap.step():
                dist.all_reduce(torch.ones(64))
    # gloo's worker threads may still hold the last collective at teardown and abort the process
    # (torch's, docs/capture.md "A gloo job that aborts at exit"): settle them first.
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(rank, args=(sys.argv[1],), nprocs=2, join=True)
    collectors.write_manifest(sys.argv[1])
"""
"""Two gloo ranks captured with ``collectors.Capture``, merged by the launching process."""


def test_two_ranks_of_the_python_api_share_a_run_and_move_the_earlier_capture_aside_once(
    earlier: Path, tmp_path: Path
) -> None:
    import socket

    before = digests(earlier)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = tmp_path / "job.py"
    script.write_text(TWO_RANK_API_JOB)

    done = subprocess.run(
        [sys.executable, str(script), str(earlier), str(port)], capture_output=True, text=True, timeout=180
    )

    assert done.returncode == 0, done.stderr[-3000:]
    aside = [path for path in earlier.iterdir() if path.name.startswith("earlier-")]
    assert len(aside) == 1 and digests(aside[0]) == before
    written = manifest(earlier)
    assert (written["complete"], written["world_size"], written["mixed_runs"]) == (True, 2, False)
    sidecars = [json.loads((earlier / f"rank{r}.meta.json").read_text()) for r in range(2)]
    assert sidecars[0]["run_id"] == sidecars[1]["run_id"] == written["run_id"] is not None
    assert not [path for path in earlier.iterdir() if path.name.startswith(".tracekit-incoming-")]
