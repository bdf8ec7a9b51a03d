"""Fixtures for GPU analyses: the shared real GPU traces, and edited copies of DeepSeek's trace."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

Document = dict[str, Any]


@pytest.fixture(scope="session")
def deepseek_trace(shared: Path) -> Path:
    """DeepSeek's published DualPipe chunk trace (one rank, H800)."""
    return shared / "traces" / "deepseek-v3-dualpipe-chunk" / "train.json.gz"


@pytest.fixture
def edited_deepseek(deepseek_trace: Path, tmp_path: Path) -> Callable[[Callable[[Document], None]], Path]:
    """``edited_deepseek(edit)``: a copy of the real trace, changed in place by ``edit``, in its own directory."""

    def make(edit: Callable[[Document], None], name: str = "rank0.json") -> Path:
        document = orjson.loads(gzip.decompress(deepseek_trace.read_bytes()))
        edit(document)
        root = tmp_path / "edited"
        root.mkdir(exist_ok=True)
        path = root / name
        path.write_bytes(orjson.dumps(document))
        return path

    return make
