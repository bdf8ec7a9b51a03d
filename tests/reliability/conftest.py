"""Fixtures for the reliability tests: small real filesystems that are full or read-only."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``tmpfs(size_kb, read_only=False)``: mount a real tmpfs of that size; skips unless root can mount."""
    mounted: list[Path] = []

    def mount(size_kb: int, read_only: bool = False) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        target = tmp_path / f"tmpfs-{len(mounted)}"
        target.mkdir()
        options = f"size={size_kb}k" + (",ro" if read_only else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, check=False
        )
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(target)
        return target

    yield mount
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


@pytest.fixture
def earlier(tmp_path: Path) -> Path:
    """A directory holding an earlier real capture (4 ranks, 1F1B), as ``record`` left it."""
    root = tmp_path / "today"
    samples = Path(__file__).resolve().parents[2] / "sample_traces"
    shutil.copytree(samples / "1f1b", root, ignore=shutil.ignore_patterns(".tracekit-cache"))
    return root
