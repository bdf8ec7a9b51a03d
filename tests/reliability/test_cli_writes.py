"""Every file a command writes (``--out``, ``--png``) that cannot be written: one line naming it and
the fault, exit status 2, never a traceback, and no half-written file left behind."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from record_runs import fill

from tracekit.cli.main import cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"

COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "report": lambda run, out: ["report", str(run), "--out", str(out)],
    "stragglers": lambda run, out: ["stragglers", str(run), "--out", str(out)],
    "whatif": lambda run, out: ["whatif", str(run), "--out", str(out)],
    "simulate": lambda run, out: ["simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--out", str(out)],
    "sweep": lambda run, out: ["sweep", "--pp", "4", "--microbatches", "8", "--out", str(out)],
    "dashboard": lambda run, out: ["dashboard", str(run), "--out", str(out / "page.html")],
    "dashboard-png": lambda run, out: [
        "dashboard", str(run), "--out", str(run.parent / "page.html"), "--png", str(out),
    ],
}
"""Command -> its arguments writing into directory ``out`` (the run is a copy of a real capture)."""


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of a real 4-rank capture (its trace cache is written beside it once)."""
    root = tmp_path_factory.mktemp("capture") / "run"
    shutil.copytree(SAMPLES / "dualpipev-straggler", root)
    return root


def _invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_output_under_a_regular_file_is_one_line(capture: Path, tmp_path: Path, command: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    code, stderr = _invoke(COMMANDS[command](capture, blocker / "out"))

    assert code == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("tracekit: error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert str(blocker) in errors[0] and "not a directory" in errors[0], errors[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_output_on_a_read_only_filesystem_is_one_line(
    capture: Path, tmpfs: Callable[..., Path], command: str
) -> None:
    read_only = tmpfs(64, read_only=True)

    code, stderr = _invoke(COMMANDS[command](capture, read_only / "out"))

    assert code == 2 and "Traceback" not in stderr, stderr
    assert f"tracekit: error: {read_only / 'out'}" in stderr and "read-only file system" in stderr, stderr


@pytest.mark.parametrize("command", ["report", "simulate", "sweep"])
def test_output_on_a_full_disk_says_so_and_leaves_nothing_half_written(
    capture: Path, tmpfs: Callable[..., Path], command: str
) -> None:
    disk = tmpfs(64)
    out = disk / "out"
    out.mkdir()
    fill(disk)

    code, stderr = _invoke(COMMANDS[command](capture, out))

    assert code == 2 and "Traceback" not in stderr, stderr
    assert "no space left on device" in stderr and str(out) in stderr, stderr
    assert list(out.iterdir()) == []


def test_nan_durations_in_an_op_table_are_one_line(shared: Path, tmp_path: Path) -> None:
    source = shared / "traces" / "whatif-optable-ST"
    table = tmp_path / "trace-ST.parquet"
    frame = pl.read_parquet(source / "trace-ST.parquet")
    frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 5).then(float("nan")).otherwise(pl.col("duration")).alias("duration")
    ).write_parquet(table)
    shutil.copy(source / "meta-ST.yaml", tmp_path / "meta-ST.yaml")

    code, stderr = _invoke(["whatif", str(table)])

    assert code == 2 and "Traceback" not in stderr, stderr
    assert f"tracekit: error: {table}: op-table has 1 non-finite duration values" in stderr
    assert "row 5: nan" in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "--schedule", "1f1b", "--pp", "100000", "--microbatches", "100000"], "more than the 1024"),
        (["simulate", "--schedule", "zbv", "--pp", "512", "--microbatches", "1000"], "3,072,000 actions"),
        (["sweep", "--pp", ",".join(map(str, range(2, 300))), "--microbatches", "8,16"], "simulations, more"),
    ],
    ids=["pp", "actions", "sweep-grid"],
)
def test_oversized_simulations_are_refused_at_once(args: list[str], message: str) -> None:
    code, stderr = _invoke(args)

    assert code == 2 and message in stderr and "Traceback" not in stderr, stderr
