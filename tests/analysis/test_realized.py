"""Reconstructing the realized schedule from labels in small real traces."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.analysis.realized import REALIZED_SCHEMA, realized_schedule
from tracekit.errors import TracekitError
from tracekit.trace.run import load_run


def _run(tmp_path: Path, make_trace, per_rank: list[list], world_size: int | None = None):
    root = tmp_path / "run"
    root.mkdir()
    for rank, labels in enumerate(per_rank):
        make_trace(root / f"rank{rank}.json.gz", labels, rank=rank, world_size=world_size or len(per_rank))
    return load_run(root, workers=1)


def _order(actions: pl.DataFrame, rank: int) -> list[str]:
    rows = actions.filter(pl.col("rank") == rank).iter_rows(named=True)
    return [f"{row['stage']}{row['kind']}{row['microbatch']}" for row in rows]


def test_tracekit_labels_with_steps(tmp_path: Path, make_trace) -> None:
    steps = [
        (f"tracekit:step#{n}", ["tracekit:0F0", "tracekit:0F1", "tracekit:0B0", "tracekit:0B1"])
        for n in (1, 2)
    ]
    run = _run(tmp_path, make_trace, [steps])

    actions = realized_schedule(run).actions

    assert dict(actions.schema) == REALIZED_SCHEMA
    assert actions["step"].to_list() == [1] * 4 + [2] * 4
    assert _order(actions, 0) == ["0F0", "0F1", "0B0", "0B1"] * 2
    assert (actions["end_ns"] > actions["start_ns"]).all()


def test_tracekit_label_wins_over_enclosing_torch_label(tmp_path: Path, make_trace) -> None:
    run = _run(tmp_path, make_trace, [[("PP:0F0", ["tracekit:0F0"]), "PP:0I0", ("PP:0W0", ["tracekit:0W0"])]])

    actions = realized_schedule(run).actions

    assert _order(actions, 0) == ["0F0", "0I0", "0W0"]
    assert actions["source"].to_list() == ["tracekit", "torch", "tracekit"]


def test_pair_with_labelled_halves_keeps_their_times(tmp_path: Path, make_trace) -> None:
    pair = ("tracekit:(1F2;6B0)OVERLAP_F_B", ["tracekit:1F2", "tracekit:6B0"])
    run = _run(tmp_path, make_trace, [["tracekit:1F0"], ["tracekit:1F1", pair]])

    actions = realized_schedule(run).actions.filter(pl.col("rank") == 1)

    assert _order(actions, 1) == ["1F1", "1F2", "6B0"]
    assert actions["overlapped"].to_list() == [False, True, True]
    forward, backward = actions.filter(pl.col("overlapped")).iter_rows(named=True)
    assert forward["end_ns"] <= backward["start_ns"]


def test_torch_pair_without_halves_becomes_two_rows_spanning_it(tmp_path: Path, make_trace) -> None:
    run = _run(tmp_path, make_trace, [["PP:0F0", "PP:(0F1;3B0)OVERLAP_F_B"]])

    actions = realized_schedule(run).actions

    assert _order(actions, 0) == ["0F0", "0F1", "3B0"]
    halves = actions.filter(pl.col("overlapped"))
    assert halves["start_ns"].n_unique() == 1 and halves["end_ns"].n_unique() == 1


def test_gpipe_labels_take_stage_from_rank(tmp_path: Path, make_trace) -> None:
    run = _run(tmp_path, make_trace, [["Forward 0", "Backward 0"], ["Forward 0", "Backward 0"]])

    actions = realized_schedule(run).actions

    assert _order(actions, 1) == ["1F0", "1B0"]


def test_repeated_actions_without_step_spans_are_numbered_by_occurrence(tmp_path: Path, make_trace) -> None:
    run = _run(tmp_path, make_trace, [["PP:0F0", "PP:0B0", "PP:0F0", "PP:0B0"]])

    actions = realized_schedule(run).actions

    assert actions["step"].to_list() == [0, 0, 1, 1]


def test_unlabelled_rank_is_reported_not_dropped(tmp_path: Path, make_trace) -> None:
    run = _run(tmp_path, make_trace, [["tracekit:0F0"], ["aten::mm"]])

    realized = realized_schedule(run)

    assert realized.actions["rank"].unique().to_list() == [0]
    assert any("ranks [1] have no schedule labels" in warning for warning in realized.warnings)


def test_no_labels_anywhere_is_an_error(shared: Path) -> None:
    run = load_run(shared / "traces" / "param-dlrm-8rank", workers=2)

    with pytest.raises(TracekitError, match="no schedule labels"):
        realized_schedule(run)
