"""Every command README.md and docs/*.md show runs as written.

The commands are the lines of each ```bash block (``\\`` continuations joined, comments dropped),
run in order as one script (a block's later lines may read what earlier ones wrote), and each inline
`` `tracekit ...` `` span with arguments and no placeholder (``DIR``, ``[...]``, ``a|b``, ``...``).
Plain ``` blocks are synopses or commands for other machines and are not run. Each runs in bash
(``set -e``) from a scratch directory that links the repository's ``sample_traces``, ``docs`` and
``benchmarks``, with ``tracekit`` meaning this checkout's ``python -m tracekit``, and must exit 0.

The README's quick start is exactly two commands, each an install followed by what it shows. The
first one's report runs here; the second one (install, then the whole suite) is what CI runs, line
for line (.ci/run): running the suite from inside itself would recurse.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
LINKED = ("sample_traces", "docs", "benchmarks")
"""Repository folders the commands name by relative path."""
NOT_RUN: dict[str, str] = {
    "live.md": "a 30-step live session serving Prometheus on a fixed port, and the capture directory its "
    "prose names comes from that session; tests/collectors' live tests run the same path",
}
"""Documents whose commands are not run here, with why (everything else must run)."""

_BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)
_INLINE = re.compile(r"`(tracekit [^`]+)`")
_PLACEHOLDER = re.compile(r"\[|\||\.\.\.|(^|\s)[A-Z][A-Z_]*(\.\w+)?(\s|$)")


def _blocks(text: str) -> list[list[str]]:
    blocks = []
    for block in _BASH_BLOCK.findall(text):
        joined = re.sub(r"\\\n\s*", "", block)
        blocks.append(
            [line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]
        )
    return blocks


def _block_commands(text: str) -> list[str]:
    return [command for block in _blocks(text) for command in block]


def _inline_commands(text: str) -> list[str]:
    spans = [span.replace("\\|", "|") for span in _INLINE.findall(text)]
    # ``tracekit record --live`` in prose names a flag: a capture is a command only with its job after ``--``.
    return [
        span
        for span in spans
        if len(span.split()) > 2
        and not _PLACEHOLDER.search(span)
        and not (span.startswith("tracekit record") and " -- " not in span)
    ]


def _quick_start() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)^## ", readme, re.DOTALL | re.MULTILINE)
    assert section is not None, "README has no quick-start section"
    return _block_commands(section[1])


def _documented_scripts() -> list[tuple[str, str]]:
    """(document, script) per bash block and inline command; the quick start is replaced by what it shows."""
    quick_start = _quick_start()
    found = []
    for document in DOCUMENTS:
        if document.name in NOT_RUN:
            continue
        text = document.read_text()
        for block in [*_blocks(text), *([command] for command in _inline_commands(text))]:
            if block == quick_start:
                continue
            found.append((document.name, "\n".join(block)))
    _install, shows = quick_start[0].split(" && ", 1)
    return [("README.md", shows), *found]


def test_quick_start_is_two_commands_and_ci_runs_the_second_as_written() -> None:
    commands = _quick_start()

    assert len(commands) == 2
    assert all(command.startswith("python -m pip install torch==2.13.0 -e ") for command in commands)
    assert commands[0].endswith("&& python -m tracekit report sample_traces/dualpipev")
    assert commands[1] in (REPO_ROOT / ".ci" / "run").read_text().splitlines()


def test_every_document_shows_commands_and_none_is_missed() -> None:
    scripts = _documented_scripts()

    named = {document for document, _ in scripts}
    assert {"README.md", "planner.md", "schedules.md"} <= named
    assert any("tracekit plan --model deepseek-v3-671b" in script for _, script in scripts)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A working directory linking the repository's folders, and an environment whose ``tracekit`` is this checkout."""
    root = tmp_path_factory.mktemp("docs-commands")
    for name in LINKED:
        (root / name).symlink_to(REPO_ROOT / name, target_is_directory=True)
    bin_dir = root / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "tracekit"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tracekit "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return root, env


@pytest.mark.slow
@pytest.mark.parametrize(("document", "script"), _documented_scripts(), ids=lambda value: value[:60])
def test_documented_commands_run_as_written(
    scratch: tuple[Path, dict[str, str]], document: str, script: str
) -> None:
    root, env = scratch

    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
        check=False,
    )

    assert done.returncode == 0, f"{document}: {script}\n{done.stderr[-3000:]}"
