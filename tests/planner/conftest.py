"""Specs the planner tests share: the two example settings of docs/examples and a small custom model."""

from __future__ import annotations

import pytest

from tracekit.planner.plan import Plan, plan
from tracekit.planner.spec import PlanSpec, load_spec

from .specs import EXAMPLES


@pytest.fixture(scope="session")
def deepseek() -> PlanSpec:
    """DeepSeek-V3's pre-training setting: 2048 H800, PP16, EP64 (docs/examples/deepseek-v3.toml)."""
    return load_spec(EXAMPLES / "deepseek-v3.toml")


@pytest.fixture(scope="session")
def llama() -> PlanSpec:
    """A dense 70B model at PP8 on 1024 H100 with no expert parallelism (docs/examples/llama3-70b.toml)."""
    return load_spec(EXAMPLES / "llama3-70b.toml")


@pytest.fixture(scope="session")
def deepseek_plan(deepseek: PlanSpec) -> Plan:
    """The plan for DeepSeek-V3's setting."""
    return plan(deepseek)


@pytest.fixture(scope="session")
def llama_plan(llama: PlanSpec) -> Plan:
    """The plan for the dense 70B model."""
    return plan(llama)
