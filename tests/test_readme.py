"""The README's quick start stays true: CI runs its test command exactly as written."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", readme, re.DOTALL)
    assert block is not None, "README has no quick-start bash block"
    return [line for line in block[1].splitlines() if line and not line.startswith("#")]


def test_quick_start_is_two_commands() -> None:
    commands = _quick_start_commands()

    assert len(commands) == 2
    assert "tracekit report sample_traces/dualpipev" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_as_written() -> None:
    ci_lines = (REPO_ROOT / ".ci" / "run").read_text().splitlines()

    assert _quick_start_commands()[1] in ci_lines
