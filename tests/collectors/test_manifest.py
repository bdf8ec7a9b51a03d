"""Merging sidecars into run.json: what makes a rank complete, and what is reported when not."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from collectors.manifest import SchemaError, parse_manifest
from collectors.merge import build_manifest

SCHEDULE = {
    "class": "Schedule1F1B",
    "name": "1f1b",
    "pp_size": 2,
    "num_stages": 2,
    "microbatches": 4,
    "stages": [0],
    "paths": [{"first_microbatch": 0, "stop_microbatch": 4, "first_stage": 0, "last_stage": 1}],
    "stage_numbering": "torch.distributed.pipelining stage_index",
}


def _sidecar(out_dir: Path, rank: int, status: str, run_id: str = "run", trace: bool = True) -> None:
    meta: dict[str, Any] = {
        "run_id": run_id,
        "rank": rank,
        "world_size": 3,
        "host": "node0",
        "torch_version": "2.13.0",
        "status": status,
        "trace": f"rank{rank}.json.gz" if status == "complete" else None,
        "problems": [],
        "steps": {"requested": [1, 3], "captured": [1, 3]},
        "schedule": {**SCHEDULE, "stages": [rank]},
    }
    (out_dir / f"rank{rank}.meta.json").write_text(json.dumps(meta))
    if trace and meta["trace"]:
        (out_dir / meta["trace"]).write_bytes(b"")


def test_ranks_are_complete_only_with_a_complete_sidecar_and_a_trace(tmp_path: Path) -> None:
    _sidecar(tmp_path, 0, "complete")
    _sidecar(tmp_path, 1, "capturing")

    manifest = build_manifest(tmp_path, run_id="run")

    assert [entry.complete for entry in manifest.ranks] == [True, False, False]
    assert "died during step #2 of the window" in manifest.ranks[1].problems[0]
    assert "killed by a signal it could not catch" in manifest.ranks[1].problems[0]
    assert "never reached the capture window" in manifest.ranks[2].problems[0]
    assert manifest.rank_to_stages == {0: (0,), 1: (1,)} and not manifest.complete


def test_a_complete_sidecar_without_its_trace_is_incomplete(tmp_path: Path) -> None:
    _sidecar(tmp_path, 0, "complete", trace=False)

    entry = build_manifest(tmp_path).ranks[0]

    assert not entry.complete and entry.problems == ("trace file rank0.json.gz is missing",)


def test_sidecars_of_another_run_are_ignored_and_reported(tmp_path: Path) -> None:
    _sidecar(tmp_path, 0, "complete", run_id="old")

    manifest = build_manifest(tmp_path, run_id="new")

    assert manifest.world_size == 0 and "ignored rank0.meta.json" in manifest.problems[0]


def test_disagreeing_ranks_are_reported(tmp_path: Path) -> None:
    _sidecar(tmp_path, 0, "complete")
    _sidecar(tmp_path, 1, "complete")
    sidecar = tmp_path / "rank1.meta.json"
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "torch_version": "2.12.0"}))

    manifest = build_manifest(tmp_path)

    assert manifest.problems == ("ranks disagree on torch version: ['2.13.0', '2.12.0']",)


def test_a_sidecar_that_breaks_the_schema_is_reported_and_its_rank_counted_missing(tmp_path: Path) -> None:
    _sidecar(tmp_path, 0, "complete")
    _sidecar(tmp_path, 1, "complete")
    sidecar = tmp_path / "rank1.meta.json"
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "status": "finished"}))

    manifest = build_manifest(tmp_path)

    assert manifest.problems[0].startswith("unreadable sidecar rank1.meta.json: status: expected one of")
    assert manifest.ranks[1].status == "missing" and not manifest.complete


def test_a_merged_manifest_reads_back_equal(tmp_path: Path) -> None:
    for rank, status in enumerate(["complete", "partial", "capturing"]):
        _sidecar(tmp_path, rank, status)

    manifest = build_manifest(tmp_path, run_id="run", command=["python", "train.py"], exit_code=1)

    assert parse_manifest(json.loads(json.dumps(manifest.to_json()))) == manifest


def test_the_collectors_schedule_names_are_the_simulators_where_it_generates_them() -> None:
    from collectors.patch_torch import SCHEDULE_NAMES
    from tracekit.schedule.registry import GENERATORS

    not_simulated = set(SCHEDULE_NAMES.values()) - set(GENERATORS)

    assert not_simulated == {"looped-bfs", "interleaved-zero-bubble", "forward-only", "csv-runtime"}


def _with_work(out_dir: Path, rank: int, stages: list[dict[str, int]]) -> None:
    path = out_dir / f"rank{rank}.meta.json"
    meta = json.loads(path.read_text())
    meta["schedule"]["stage_work"] = stages
    path.write_text(json.dumps(meta))


def test_each_stages_work_is_listed_once_and_disagreement_reported(tmp_path: Path) -> None:
    for rank in range(3):
        _sidecar(tmp_path, rank, "complete")
    work = {"params": 10, "embedding_params": 0, "layers": 2}
    _with_work(tmp_path, 0, [{"stage": 0, **work}])
    _with_work(tmp_path, 1, [{"stage": 1, **work}])
    _with_work(tmp_path, 2, [{"stage": 1, **work, "layers": 3}])  # a replica that counts otherwise

    manifest = build_manifest(tmp_path, run_id="run")

    assert [(w.stage, w.params, w.layers) for w in manifest.stage_work] == [(0, 10, 2), (1, 10, 2)]
    assert any("counts stage 1's work" in problem for problem in manifest.problems)
    assert parse_manifest(json.loads(json.dumps(manifest.to_json()))).stage_work == manifest.stage_work


def test_no_counted_work_leaves_stage_work_null(tmp_path: Path) -> None:
    _sidecar(tmp_path, 0, "complete")

    assert build_manifest(tmp_path, run_id="run").stage_work is None


def _replica_sidecars(out_dir: Path, groups: list[list[int]], named: dict[int, list[int] | None]) -> None:
    """Complete 8-rank sidecars of a 1F1B run on pipeline ``groups``; rank r names ``named[r]`` as its group."""
    for group in groups:
        for pp_rank, rank in enumerate(group):
            schedule = {**SCHEDULE, "pp_size": len(group), "num_stages": len(group), "stages": [pp_rank]}
            meta = {
                "rank": rank,
                "world_size": 8,
                "status": "complete",
                "trace": f"rank{rank}.json.gz",
                "schedule": schedule,
            }
            if named.get(rank, group) is not None:  # absent, as in sidecars written before the field
                schedule["pipeline_group"] = named.get(rank, group)
            (out_dir / f"rank{rank}.meta.json").write_text(json.dumps(meta))
            (out_dir / meta["trace"]).write_bytes(b"")


@pytest.mark.parametrize(
    ("groups", "merged"),
    [
        ([[0, 1, 2, 3], [4, 5, 6, 7]], ((0, 1, 2, 3), (4, 5, 6, 7))),  # contiguous
        ([[0, 2, 4, 6], [1, 3, 5, 7]], ((0, 2, 4, 6), (1, 3, 5, 7))),  # strided (Megatron's order)
        ([[7, 6, 5, 4], [3, 2, 1, 0]], ((3, 2, 1, 0), (7, 6, 5, 4))),  # pipeline rank order, not rank order
    ],
)
def test_pipeline_groups_are_merged_in_pipeline_rank_order_sorted_by_first_rank(
    tmp_path: Path, groups: list[list[int]], merged: tuple[tuple[int, ...], ...]
) -> None:
    # Each rank reports its group by group rank (sorted ranks, as dist.new_group numbers them).
    _replica_sidecars(tmp_path, groups, {rank: sorted(group) for group in groups for rank in group})

    manifest = build_manifest(tmp_path)

    assert manifest.pipeline_groups == merged and manifest.problems == ()
    assert parse_manifest(json.loads(json.dumps(manifest.to_json()))).pipeline_groups == merged


@pytest.mark.parametrize(
    ("named", "problem"),
    [
        ({5: [0, 5, 6, 7]}, "ranks disagree on pipeline groups"),
        ({5: [0, 1, 2, 3]}, "rank 5 names pipeline group [0, 1, 2, 3], which leaves it out"),
        ({r: [0, 1, 2, 3, 4, 5, 6, 7] for r in range(4, 8)}, "ranks disagree on pipeline groups"),
    ],
)
def test_disagreeing_pipeline_groups_are_a_problem_never_a_crash(
    tmp_path: Path, named: dict[int, list[int]], problem: str
) -> None:
    _replica_sidecars(tmp_path, [[0, 1, 2, 3], [4, 5, 6, 7]], named)

    manifest = build_manifest(tmp_path)

    assert manifest.pipeline_groups is None
    assert any(p.startswith(problem) for p in manifest.problems), manifest.problems


def test_groups_of_another_size_than_the_pipeline_are_a_problem(tmp_path: Path) -> None:
    _replica_sidecars(tmp_path, [[0, 1, 2, 3], [4, 5, 6, 7]], {r: [0, 1, 2, 3, 4, 5, 6, 7] for r in range(8)})

    manifest = build_manifest(tmp_path)

    assert manifest.pipeline_groups is None
    assert "pipeline groups of 8 ranks for a schedule of 4 pipeline ranks" in manifest.problems


def test_sidecars_without_groups_leave_them_unknown(tmp_path: Path) -> None:
    _replica_sidecars(tmp_path, [[0, 1, 2, 3], [4, 5, 6, 7]], {r: None for r in range(8)})

    manifest = build_manifest(tmp_path)

    assert manifest.pipeline_groups is None and manifest.problems == ()


def test_a_manifest_written_before_pipeline_groups_still_loads(tmp_path: Path) -> None:
    _replica_sidecars(tmp_path, [[0, 1, 2, 3], [4, 5, 6, 7]], {})
    written = build_manifest(tmp_path).to_json()
    old = {key: value for key, value in written.items() if key != "pipeline_groups"}

    assert written["pipeline_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert parse_manifest(old).pipeline_groups is None


@pytest.mark.parametrize(
    ("groups", "fault"),
    [
        ([[0, 1], [1, 2]], "pipeline_groups[1]: rank 1 is in two pipeline groups"),
        ([[0, 1], [2]], "pipeline_groups[1] holds 1 ranks, pipeline_groups[0] 2"),
        ([[0, 1], [2, 9]], "pipeline_groups[1] names rank 9 outside 0..3"),
        ([[2, 3], [0, 1]], "pipeline_groups[1]: groups are not sorted by their first rank"),
    ],
)
def test_a_manifest_with_bad_pipeline_groups_is_refused_naming_the_fault(
    tmp_path: Path, groups: list[list[int]], fault: str
) -> None:
    for rank in range(4):
        _sidecar(tmp_path, rank, "complete")
    payload = {**build_manifest(tmp_path).to_json(), "pipeline_groups": groups}

    with pytest.raises(SchemaError, match=re.escape(fault)):
        parse_manifest(payload)
