"""The torch range pyproject declares (for the collectors) is the one the suite runs on: CI installs
its lower end, and every extra declares the same range."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging import specifiers as packaging_specifiers
from packaging import version as packaging_version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _torch_requirement() -> str:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    declared = {dep.removeprefix("torch") for deps in extras.values() for dep in deps if re.match(r"torch\b", dep)}
    assert len(declared) == 1, f"the extras declare different torch ranges: {declared}"
    return declared.pop()


def test_the_installed_torch_is_inside_the_declared_range() -> None:
    import torch

    declared = packaging_specifiers.SpecifierSet(_torch_requirement())

    assert packaging_version.Version(torch.__version__).public in declared, (torch.__version__, declared)


def test_ci_installs_the_lower_end_of_the_declared_range() -> None:
    pinned = re.search(r"torch==(\S+)", (ROOT / ".ci" / "run").read_text())
    declared = packaging_specifiers.SpecifierSet(_torch_requirement())

    assert pinned is not None and pinned[1] in declared
    lower = min(spec.version for spec in declared if spec.operator == ">=")
    assert packaging_version.Version(pinned[1]).release[:2] == packaging_version.Version(lower).release[:2]
