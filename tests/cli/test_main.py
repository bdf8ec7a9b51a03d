"""The command group: on two cores, a command's polars pool is one thread, never set for a user's job."""

from __future__ import annotations

import os

import pytest

from tracekit.cli.main import one_polars_thread


@pytest.mark.parametrize(
    ("command", "cores", "expected"), [("report", 2, "1"), ("report", 4, None), ("record", 2, None)]
)
def test_a_command_on_two_cores_runs_polars_on_one_thread_but_never_sets_it_for_a_job(
    command: str, cores: int, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``record`` starts the user's job, which inherits its environment: it sets nothing there."""
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)

    one_polars_thread(command)

    assert os.environ.get("POLARS_MAX_THREADS") == expected


def test_a_thread_count_set_by_the_user_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLARS_MAX_THREADS", "2")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)

    one_polars_thread("report")

    assert os.environ["POLARS_MAX_THREADS"] == "2"
