"""Planner inputs that make no physical sense are refused in one line, never planned."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracekit.cli.main import cli

BASE = ["plan", "--model", "llama3-70b", "--cluster", "h100-64"]


@pytest.mark.parametrize(
    ("extra", "fault"),
    [
        (["--hidden", "1"], "hidden (1) must be a multiple of heads"),
        (["--hidden", "32", "--heads", "32"], "hidden (32) is below"),
        (["--intra-node-gbps", "3600000"], "intra_node_gbps = 3600000.0 is beyond any GPU built"),
    ],
    ids=["hidden-1", "tiny-hidden", "bandwidth-in-bits"],
)
def test_a_model_of_no_physical_sense_is_refused_in_one_line(extra: list[str], fault: str) -> None:
    result = CliRunner().invoke(cli, [*BASE, *extra])

    assert result.exit_code == 2 and "Traceback" not in result.stderr, result.output
    assert result.stderr.count("\n") == 1 and fault in result.stderr


def test_the_preset_itself_still_plans() -> None:
    result = CliRunner().invoke(cli, BASE)

    assert result.exit_code == 0, result.stderr
