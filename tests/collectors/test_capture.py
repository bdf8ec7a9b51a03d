"""The Python API (``Capture``, ``step``, ``mark``) in this process: a custom loop on one rank."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from collectors import Capture, mark, mark_comm, mark_pair, step, write_manifest
from collectors.capture import CaptureConfig


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TRACEKIT_OUT", "TRACEKIT_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


def _labels(path: Path) -> list[str]:
    trace = json.loads(gzip.decompress(path.read_bytes()))
    spans = [event for event in trace["traceEvents"] if event.get("cat") == "user_annotation"]
    return [event["name"] for event in sorted(spans, key=lambda event: event["ts"])]


def _train(steps: int, cap: Capture, before_step: dict[int, Callable[[], None]] | None = None) -> None:
    weight = torch.randn(64, 64, requires_grad=True)
    for index in range(steps):
        if before_step and index in before_step:
            before_step[index]()
        with cap.step():
            for mb in range(2):
                with mark(0, "F", mb):
                    loss = (torch.ones(8, 64) @ weight).sum()
                with mark_comm("recv"):
                    pass
                with mark(0, "B", mb):
                    loss.backward()


def test_capture_labels_the_requested_steps_only(tmp_path: Path) -> None:
    with Capture(tmp_path, steps=range(1, 3), patch=False) as cap:
        _train(4, cap)

    labels = [label for label in _labels(tmp_path / "rank0.json.gz") if label.startswith("tracekit:")]
    one_step = ["0F0", "comm:recv", "0B0", "0F1", "comm:recv", "0B1"]
    expected = ["step#0", *one_step, "step#1", *one_step]
    assert labels == [f"tracekit:{label}" for label in expected]
    meta = json.loads((tmp_path / "rank0.meta.json").read_text())
    assert (meta["status"], meta["steps"]["captured"], meta["problems"]) == ("complete", [1, 3], [])


@pytest.mark.parametrize("probes", [True, False])
def test_probes_are_written_beside_the_trace_unless_turned_off(tmp_path: Path, probes: bool) -> None:
    with Capture(tmp_path, steps=range(1, 3), patch=False, probes=probes) as cap:
        _train(3, cap)

    assert (tmp_path / "rank0.json.gz").exists()
    assert (tmp_path / "rank0.probes.jsonl.gz").exists() is probes
    meta = json.loads((tmp_path / "rank0.meta.json").read_text())
    assert (meta["status"], meta["problems"]) == ("complete", [])


def test_open_ended_window_is_written_when_the_capture_ends(tmp_path: Path) -> None:
    with Capture(tmp_path, steps="1:", patch=False) as cap:
        _train(3, cap)

    steps = [label for label in _labels(tmp_path / "rank0.json.gz") if label.startswith("tracekit:step#")]
    assert steps == ["tracekit:step#0", "tracekit:step#1"]
    meta = json.loads((tmp_path / "rank0.meta.json").read_text())
    assert (meta["status"], meta["steps"]["requested"], meta["steps"]["captured"]) == (
        "complete",
        [1, None],
        [1, 3],
    )


def test_write_manifest_merges_the_sidecar(tmp_path: Path) -> None:
    with Capture(tmp_path, steps="0:1", patch=False) as cap:
        _train(1, cap)

    manifest = write_manifest(tmp_path)

    assert manifest.complete and manifest.world_size == 1
    assert json.loads((tmp_path / "run.json").read_text()) == manifest.to_json()


def test_marks_outside_a_capture_record_nothing() -> None:
    with (
        torch.profiler.profile() as profiler,
        step(),
        mark(1, "W", 2),
        mark_pair((0, 1), (3, "B", 0)),
        mark_comm("send"),
    ):
        torch.ones(2) + 1

    assert not [event for event in profiler.events() if event.name.startswith("tracekit:")]


@pytest.mark.parametrize(
    "call",
    [lambda: mark(0, "X", 0), lambda: mark_pair((0, 0), (1, "W", 0)), lambda: mark_comm("broadcast")],
    ids=["kind", "pair-backward", "comm-op"],
)
def test_marks_reject_unknown_codes(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        call()


def test_job_ending_inside_the_window_leaves_a_partial_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Capture(tmp_path, steps=range(1, 5), patch=False) as cap:
        _train(3, cap)

    assert not (tmp_path / "rank0.json.gz").exists()
    assert "tracekit:step#1" in _labels(tmp_path / "rank0.partial.json.gz")
    entry = write_manifest(tmp_path).ranks[0]
    assert (entry.complete, entry.status, entry.trace) == (False, "partial", "rank0.partial.json.gz")
    assert "tracekit: rank 0: the job ended after 2 of 4 requested steps" in capsys.readouterr().err


def test_unwritable_directory_is_reported_and_training_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    with Capture(blocker / "traces", steps=range(2), patch=False) as cap:
        _train(3, cap)

    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"tracekit: rank 0: cannot write to {blocker / 'traces'}")


def test_directory_lost_mid_capture_is_reported_and_training_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "traces"

    def lose_the_directory() -> None:
        # What a full disk or a vanished mount looks like to the export: the write fails.
        shutil.rmtree(out_dir)
        out_dir.write_text("")

    with Capture(out_dir, steps=range(2), patch=False) as cap:
        _train(3, cap, before_step={1: lose_the_directory})

    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"tracekit: rank 0: cannot write {out_dir / 'rank0.json.gz'}")


@pytest.mark.parametrize(("value", "probes"), [(None, True), ("1", True), ("0", False)])
def test_tracekit_probes_in_the_environment_turns_the_probes_on_or_off(value: str | None, probes: bool) -> None:
    environ = {"TRACEKIT_OUT": "/tmp/out", **({} if value is None else {"TRACEKIT_PROBES": value})}
    config = CaptureConfig.from_env(environ)
    assert config is not None and config.probes is probes and config.profile_memory
