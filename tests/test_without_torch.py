"""The analysis installs and runs without torch: report, stragglers, whatif, dashboard and simulate.

A plain virtual environment (no system site-packages) gets tracekit with ``pip install --no-deps
-e .`` and, instead of a download, the installed distributions of tracekit's other requirements
(the closure of pyproject's dependencies, read from this interpreter's metadata) linked into its
site-packages, so the test runs offline in seconds and pip sees them as installed. torch is then
not importable there, and every analysis command must still work.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

from collectors.launch import NOTHING_CAPTURED_EXIT
from tracekit.compat import tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE = REPO_ROOT / "sample_traces" / "dualpipev"

pytestmark = pytest.mark.slow


def _closure(roots: list[str]) -> list[metadata.Distribution]:
    """The installed distributions ``roots`` need, transitively (markers evaluated, no extras)."""
    environment = default_environment()
    found: dict[str, metadata.Distribution] = {}
    pending = list(roots)
    while pending:
        requirement = Requirement(pending.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({**environment, "extra": ""}):
            continue
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if name in found:
            continue
        found[name] = metadata.distribution(requirement.name)
        pending.extend(found[name].requires or [])
    return list(found.values())


def _link_into(site_packages: Path, distribution: metadata.Distribution) -> None:
    """Link every top-level file or folder of ``distribution`` into ``site_packages``."""
    origin = Path(distribution.locate_file(""))
    for top in sorted({Path(str(file)).parts[0] for file in distribution.files or ()}):
        source, target = origin / top, site_packages / top
        if source.exists() and not target.exists() and not top.startswith(".."):
            target.symlink_to(source)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment's python with tracekit and its requirements but no torch."""
    venv = tmp_path_factory.mktemp("without-torch") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    requirements = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not any(Requirement(r).name == "torch" for r in requirements), "torch is a core requirement"
    for distribution in _closure([*requirements, "setuptools"]):
        _link_into(site_packages, distribution)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--no-index", "-e", str(REPO_ROOT)],
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    return python


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_torch_is_not_importable_there(bare_python: Path, tmp_path: Path) -> None:
    probe = _run(bare_python, "-c", "import torch", cwd=tmp_path)

    assert probe.returncode != 0 and "No module named 'torch'" in probe.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["report", str(SAMPLE), "--format", "json"],
        ["stragglers", str(SAMPLE), "--format", "json"],
        ["whatif", str(SAMPLE), "--format", "json"],
        ["simulate", "--schedule", "dualpipev", "--pp", "4", "--microbatches", "8", "--format", "json"],
    ],
    ids=lambda command: command[0],
)
def test_an_analysis_command_runs_without_torch(bare_python: Path, tmp_path: Path, command: list[str]) -> None:
    done = _run(bare_python, "-m", "tracekit", *command, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)


def test_nothing_of_the_analysis_imports_torch(bare_python: Path, tmp_path: Path) -> None:
    done = _run(bare_python, "-c", _IMPORTS_NO_TORCH, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_dashboard_builds_without_torch(bare_python: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"

    done = _run(bare_python, "-m", "tracekit", "dashboard", str(SAMPLE), "--out", str(page), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert page.stat().st_size > 10_000 and "<html" in page.read_text()[:500].lower()


def test_record_says_in_one_line_that_the_jobs_python_lacks_torch(bare_python: Path, tmp_path: Path) -> None:
    done = _run(
        bare_python, "-m", "tracekit", "record", "--out", str(tmp_path / "run"), "--",
        str(bare_python), "-c", "print('training')", cwd=tmp_path,
    )

    lines = [line for line in done.stderr.splitlines() if line.startswith(f"tracekit: {bare_python} has no torch")]
    # The job runs uncaptured, so record gives its documented "nothing captured" status, and
    # names the missing torch as the cause, not an unrecognized schedule.
    assert done.returncode == NOTHING_CAPTURED_EXIT and "training" in done.stdout
    assert len(lines) == 1 and str(bare_python) in lines[0]
    assert f"nothing was captured: the job ran under {bare_python}, which has no torch" in done.stderr
    assert "pip install 'tracekit[collect]'" in done.stderr  # printed as written, not read as markup
    assert "recognizes" not in done.stdout + done.stderr
    assert not list((tmp_path / "run").glob(".tracekit-*"))


_IMPORTS_NO_TORCH = """
import importlib, pkgutil, sys
import collectors, collectors.launch, collectors.manifest, collectors.merge, dashboards, tracekit
for package in (tracekit, dashboards):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not module.name.endswith(".__main__"):
            importlib.import_module(module.name)
print(sorted(name for name in sys.modules if name.split('.')[0] == 'torch'))
"""
"""Imports every module of tracekit and dashboards, and the collectors the command line uses."""
