"""Bad values in labels or layouts are counted and named, never turned into silent wrong numbers:
an action longer than its step is left out with one warning naming the rank, and a ``--pipelines``
layout whose replicas hold different stages is refused in one line."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.analysis.realized import realized_schedule
from tracekit.cli.main import cli
from tracekit.trace.run import load_run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _with_label_field(root: Path, rank: int, label: str, field: str, value: object) -> Path:
    """A copy of the 1F1B capture whose rank ``rank`` gives action ``label`` this ``field`` value."""
    shutil.copytree(SAMPLES / "1f1b", root, ignore=shutil.ignore_patterns(".tracekit-cache"))
    path = root / f"rank{rank}.json.gz"
    trace = json.loads(gzip.decompress(path.read_bytes()))
    event = next(e for e in trace["traceEvents"] if e.get("name") == label and e.get("ph") == "X")
    event[field] = value
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return root


def _with_label_duration(root: Path, rank: int, label: str, dur_us: float) -> Path:
    """A copy of the 1F1B capture whose rank ``rank`` says action ``label`` lasted ``dur_us``."""
    return _with_label_field(root, rank, label, "dur", dur_us)


@pytest.mark.parametrize("field", ["ts", "dur"])
def test_a_label_whose_time_is_not_a_number_is_counted_and_named(tmp_path: Path, field: str) -> None:
    root = _with_label_field(tmp_path / "run", 1, "tracekit:1F3", field, "abc")

    realized = realized_schedule(load_run(root, workers=1))
    intact = realized_schedule(load_run(SAMPLES / "1f1b", workers=1))

    named = [w for w in load_run(root, workers=1).warnings if "not a number" in w]
    assert len(named) == 1 and "rank1.json.gz: 1 complete events" in named[0]
    assert realized.actions.height == intact.actions.height - 1


def test_an_action_longer_than_its_step_is_left_out_and_named(tmp_path: Path) -> None:
    root = _with_label_duration(tmp_path / "run", 1, "tracekit:1F3", 1e12)  # 11.6 days

    realized = realized_schedule(load_run(root, workers=1))
    intact = realized_schedule(load_run(SAMPLES / "1f1b", workers=1))

    overran = [w for w in realized.warnings if "end after the step they started in" in w]
    assert len(overran) == 1 and "rank 1: 1 labelled actions" in overran[0] and "left out" in overran[0]
    assert realized.actions.height == intact.actions.height - 1
    window = realized.actions["end_ns"].max() - realized.actions["start_ns"].min()  # type: ignore[operator]
    assert window < 10 * 1e9  # seconds, not days


def test_a_sound_capture_has_no_such_warning() -> None:
    realized = realized_schedule(load_run(SAMPLES / "1f1b", workers=1))

    assert not [w for w in realized.warnings if "end after the step" in w]


@pytest.mark.parametrize("layout", ["contiguous:2", "strided:2"])
def test_a_layout_whose_replicas_hold_different_stages_is_refused(layout: str) -> None:
    result = CliRunner().invoke(cli, ["whatif", str(SAMPLES / "1f1b"), "--pipelines", layout])

    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "replicas hold different stages" in result.stderr


def test_the_layout_the_job_used_is_accepted() -> None:
    result = CliRunner().invoke(cli, ["report", str(SAMPLES / "1f1b"), "--pipelines", "contiguous:4"])

    assert result.exit_code == 0, result.stderr
