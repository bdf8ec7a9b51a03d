"""On a real Dask cluster of separate worker processes, the commands print what they print on one machine."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli.main import cli
from tracekit.perrank import tasks
from tracekit.trace.run import CACHE_DIR_NAME

distributed = pytest.importorskip("distributed")

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """The address of a local cluster: two worker processes, one thread each."""
    with distributed.LocalCluster(
        processes=True,
        n_workers=2,
        threads_per_worker=1,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as cluster:
        yield cluster.scheduler_address


def _output(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _source(name: str, shared: Path | None) -> Path:
    return SAMPLES / name if (SAMPLES / name).is_dir() else shared / "traces" / name  # type: ignore[operator]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "commands"),
    [
        ("dualpipev-straggler", ("report", "stragglers", "whatif")),
        ("hta-sampled-2rank", ("report",)),
    ],
)
def test_commands_on_the_cluster_print_the_single_machine_figures(
    scheduler: str,
    name: str,
    commands: tuple[str, ...],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shared = request.getfixturevalue("shared") if not (SAMPLES / name).is_dir() else None
    root = tmp_path / name
    shutil.copytree(_source(name, shared), root, ignore=shutil.ignore_patterns(CACHE_DIR_NAME))
    root.chmod(0o755)  # the shared traces are read-only; this copy keeps its caches beside it

    def not_here(*args: object, **kwargs: object) -> None:
        raise AssertionError("with --scheduler, ranks are reduced on the cluster's workers, not here")

    with monkeypatch.context() as patched:
        for reduction in ("rank_labels", "rank_timeline", "rank_figures"):
            patched.setattr(tasks, reduction, not_here)
        on_cluster = [
            _output(command, str(root), "--format", "json", "--scheduler", scheduler) for command in commands
        ]
    assert any((root / CACHE_DIR_NAME).glob("*.derived.json")), (
        "the workers keep their results beside the traces"
    )
    shutil.rmtree(root / CACHE_DIR_NAME)
    here = [_output(command, str(root), "--format", "json") for command in commands]

    assert on_cluster == here


def test_an_unreachable_scheduler_is_one_line_and_exit_2_without_hanging() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit",
            "report",
            str(SAMPLES / "1f1b"),
            "--scheduler",
            f"tcp://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot reach the Dask scheduler" in done.stderr
    assert f"tcp://127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 60
