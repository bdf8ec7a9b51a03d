"""Traces of two captures in one directory are refused in one line naming each run's files,
never averaged into one run's figures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli.main import cli
from tracekit.errors import TracekitError
from tracekit.trace.run import load_run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _mix(root: Path, first: str, second: str) -> Path:
    """Ranks 0-1 of capture ``first`` (with its run.json) and ranks 2-3 of ``second``."""
    root.mkdir()
    for rank, source in ((0, first), (1, first), (2, second), (3, second)):
        for name in (f"rank{rank}.json.gz", f"rank{rank}.meta.json"):
            shutil.copy(SAMPLES / source / name, root / name)
    shutil.copy(SAMPLES / first / "run.json", root / "run.json")
    return root


@pytest.mark.parametrize(
    ("first", "second", "schedules"),
    [
        ("dualpipev", "dualpipev-straggler", ("dualpipev", "dualpipev")),
        ("1f1b", "dualpipev", ("1f1b", "dualpipev")),
    ],
    ids=["same-schedule", "other-schedule"],
)
def test_two_captures_in_one_directory_are_refused(
    tmp_path: Path, first: str, second: str, schedules: tuple[str, str]
) -> None:
    root = _mix(tmp_path / "mixed", first, second)

    with pytest.raises(TracekitError) as refused:
        load_run(root, workers=1)

    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{root}: two runs mixed")
    first_run, second_run = message.split("; ")
    assert f"schedule {schedules[0]})" in first_run and "rank0.json.gz, rank1.json.gz" in first_run
    assert f"schedule {schedules[1]})" in second_run and "rank2.json.gz, rank3.json.gz" in second_run
    assert "world size 4" in first_run and "world size 4" in second_run


@pytest.mark.parametrize("command", ["report", "stragglers", "whatif", "dashboard"])
def test_every_command_refuses_a_mixed_directory_in_one_line(tmp_path: Path, command: str) -> None:
    root = _mix(tmp_path / "mixed", "1f1b", "dualpipev")
    extra = ["--out", str(tmp_path / "page.html")] if command == "dashboard" else []

    result = CliRunner().invoke(cli, [command, str(root), *extra])

    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "two runs mixed" in result.stderr
    assert not (tmp_path / "page.html").exists()


def test_a_run_json_of_another_capture_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "run"
    shutil.copytree(SAMPLES / "dualpipev", root, ignore=shutil.ignore_patterns(".tracekit-cache"))
    shutil.copy(SAMPLES / "dualpipev-straggler" / "run.json", root / "run.json")

    with pytest.raises(TracekitError, match=r"two runs mixed.*run\.json"):
        load_run(root, workers=1)
