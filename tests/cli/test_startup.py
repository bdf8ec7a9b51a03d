"""Start-up: each command imports only what it uses, and ``tracekit --help`` imports no command.

Every check runs a fresh interpreter and reads its ``sys.modules`` at exit, so an import added at
the top of any module on a command's path shows here as the package it drags in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.cli.main import COMMANDS, cli

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "1f1b"
HEAVY = ("polars", "numpy", "pyarrow", "rich", "yaml", "altair", "vl_convert", "dask", "distributed", "torch")
"""Packages that cost tens to hundreds of milliseconds to import, or are optional."""
NEVER_IN_ANALYSIS = {"altair", "vl_convert", "dask", "distributed", "torch", "pandas"}
"""Packages a command that analyses a run without ``--scheduler`` and draws no chart never needs."""
NOT_IN_A_REPORT = (
    "tracekit.whatif",
    "tracekit.stragglers",
    "tracekit.planner",
    "tracekit.analysis.ideal",
    "yaml",
    "rich.progress",
)
"""What ``report`` never computes (the replay, the stragglers, the planner, the ideal, the op-table's
YAML) and, with its output piped, never draws (a progress bar)."""


ATTEMPTS = {"cold": (), "cached": ("--threshold", "0.3"), "stored": ()}
"""A first report (every trace parsed), one whose result is not stored but whose traces and per-rank
reductions are cached (another option), and the first one again (its result stored)."""


def _modules_after(*argv: str) -> tuple[set[str], int]:
    """The modules a fresh ``tracekit *argv`` had imported when it exited, and its exit status."""
    probe = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
        "from tracekit.cli.main import main\n"
        f"sys.argv = ['tracekit', *{list(argv)!r}]\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    line = next(line for line in done.stderr.splitlines() if line.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES "))), done.returncode


def _packages(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def _under(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    """The modules that are one of ``prefixes`` or inside one of them."""
    return sorted(name for name in modules if any(name == p or name.startswith(p + ".") for p in prefixes))


def test_help_imports_no_command_and_no_heavy_package() -> None:
    modules, status = _modules_after("--help")

    assert status == 0
    assert not _packages(modules) & set(HEAVY), sorted(_packages(modules) & set(HEAVY))
    assert {name for name in modules if name.startswith("tracekit.cli.")} == {
        "tracekit.cli.main",
        "tracekit.cli.files",
    }


def test_a_report_imports_no_chart_cluster_or_torch_package(tmp_path: Path) -> None:
    run = tmp_path / "1f1b"
    shutil.copytree(SAMPLE, run)

    for attempt, extra in ATTEMPTS.items():
        modules, status = _modules_after("report", str(run), "--format", "json", *extra)
        assert status == 0, attempt
        unwanted = _packages(modules) & (NEVER_IN_ANALYSIS | {"rich"})  # JSON, piped: no table, no bar
        assert not unwanted, (attempt, sorted(unwanted))
        assert "tracekit.cli.dashboard" not in modules and "tracekit.cli.plan" not in modules
        assert not _under(modules, NOT_IN_A_REPORT), (attempt, _under(modules, NOT_IN_A_REPORT))


def test_a_report_of_gpu_figures_loads_no_numpy_or_pyarrow(shared: Path, tmp_path: Path) -> None:
    """Eight unlabelled GPU ranks: the first report's scanner hands its columns to polars through
    the Arrow C data interface, not pyarrow; the cached one reads the reductions and draws them."""
    run = tmp_path / "dlrm"
    shutil.copytree(shared / "traces" / "param-dlrm-8rank", run)
    run.chmod(0o755)

    for attempt, extra in ATTEMPTS.items():
        modules, status = _modules_after("report", str(run), *extra)
        assert status == 0, attempt
        assert not _under(modules, ("numpy", "pyarrow", *NOT_IN_A_REPORT)), (
            attempt,
            _under(modules, ("numpy", "pyarrow")),
        )
        assert not _packages(modules) & NEVER_IN_ANALYSIS, attempt


def test_a_stored_report_loads_neither_polars_nor_the_analysis(tmp_path: Path) -> None:
    """A report whose result is stored (``tracekit.cli.result_store``) prints it: the interpreter,
    click, rich and the key's file listing, nothing that computes."""
    run = tmp_path / "1f1b"
    shutil.copytree(SAMPLE, run)
    _, status = _modules_after("report", str(run))
    assert status == 0

    modules, status = _modules_after("report", str(run))

    assert status == 0
    assert not _packages(modules) & {"polars", "numpy", "pyarrow"}, sorted(_packages(modules) & set(HEAVY))
    computing = ("tracekit.run_analysis", "tracekit.analysis.realized", "tracekit.gpu.analysis")
    assert not _under(modules, computing), _under(modules, computing)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_listed_command_loads_under_its_name(name: str) -> None:
    command = cli.get_command(None, name)  # type: ignore[arg-type]

    assert command is not None and command.name == name
    assert COMMANDS[name][1].endswith(".") and len(COMMANDS[name][1]) <= 60


def test_a_command_reads_no_source_for_its_options_help_unless_help_is_shown(tmp_path: Path) -> None:
    """Parsing the config classes' source for their fields' docstrings cost a tenth of a CPU second of
    every command's start-up; only ``--help`` needs it."""
    probe = (
        "import sys\n"
        "from tracekit.cli.main import main\n"
        "from tracekit.cli import options\n"
        "sys.argv = ['tracekit', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('PARSED', options._field_docs.cache_info().currsize)\n"
    )
    run = tmp_path / "1f1b"
    shutil.copytree(SAMPLE, run)
    runs = {
        args: subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        for args in (("report", str(run), "--format", "json"), ("stragglers", "--help"))
    }

    parsed = {args[0]: int(done.stdout.rsplit("PARSED ", 1)[1]) for args, done in runs.items()}
    assert parsed["report"] == 0 and parsed["stragglers"] > 0, {args: done.stderr for args, done in runs.items()}
