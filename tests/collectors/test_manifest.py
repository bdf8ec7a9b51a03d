"""Merging sidecars into run.json: what makes a rank complete, and what is reported when not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collectors.manifest import parse_manifest
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
