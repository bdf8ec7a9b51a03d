"""Loading a run directory: discovery, one-run checks, partial runs, the Parquet cache."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from collectors.manifest import INCOMING_PREFIX, RUN_ID_METADATA, Manifest, RankEntry, parse_manifest
from tracekit.errors import TracekitError
from tracekit.trace import kineto
from tracekit.trace.run import CACHE_DIR_NAME, load_run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _two_ranks(root: Path, make_trace, world_size: int = 2) -> Path:
    root.mkdir()
    for rank in range(2):
        make_trace(root / f"rank{rank}.json.gz", [f"tracekit:{rank}F0"], rank=rank, world_size=world_size)
    return root


def test_loads_real_eight_rank_run(shared: Path) -> None:
    run = load_run(shared / "traces" / "param-dlrm-8rank", workers=2)

    assert run.ranks == tuple(range(8)) and run.world_size == 8
    assert not run.partial and run.missing_ranks == ()
    assert sorted(run.events["rank"].unique().to_list()) == list(range(8))


def test_sampled_run_is_flagged_partial_naming_missing_ranks(shared: Path, tmp_path: Path) -> None:
    root = tmp_path / "sampled"
    shutil.copytree(shared / "traces" / "hta-sampled-2rank", root)

    run = load_run(root)

    assert run.partial and run.ranks == (0, 1) and run.world_size == 128
    assert len(run.missing_ranks) == 126
    assert any("2 of 128 ranks present; missing ranks 2-127" in warning for warning in run.warnings)


def test_missing_rank_of_small_run_is_named(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace, world_size=3)

    run = load_run(root)

    assert run.missing_ranks == (2,)
    assert any("missing ranks 2" in warning for warning in run.warnings)


def test_cache_is_reused_while_traces_are_unchanged(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    first = load_run(root)
    cached = sorted((root / CACHE_DIR_NAME).glob("*.parquet"))
    stamps = [path.stat().st_mtime_ns for path in cached]

    second = load_run(root)

    assert len(cached) == 2
    assert [path.stat().st_mtime_ns for path in cached] == stamps
    assert second.events.equals(first.events)


def test_cache_is_rebuilt_when_a_trace_changes(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    load_run(root)
    make_trace(root / "rank1.json.gz", ["tracekit:1F0", "tracekit:1F1"], rank=1, world_size=2)

    run = load_run(root)

    names = run.events.filter(run.events["rank"] == 1)["name"].to_list()
    assert "tracekit:1F1" in names


def test_unwritable_cache_falls_back_to_temp_dir(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    (root / CACHE_DIR_NAME).write_text("a file where the cache directory would go")

    run = load_run(root)

    assert run.ranks == (0, 1)
    assert (root / CACHE_DIR_NAME).is_file()


def test_directory_without_traces(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")

    with pytest.raises(TracekitError, match="no trace files"):
        load_run(tmp_path)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(TracekitError, match="no such file or directory"):
        load_run(tmp_path / "absent")


def test_two_runs_mixed_by_duplicate_rank(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    make_trace(root / "other-rank1.json.gz", ["tracekit:1F0"], rank=1, world_size=2)

    with pytest.raises(TracekitError, match="two runs mixed: rank 1 appears in"):
        load_run(root)


def test_two_runs_mixed_by_world_size(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    make_trace(root / "rank2.json.gz", ["tracekit:2F0"], rank=2, world_size=4)

    with pytest.raises(TracekitError, match="two runs mixed: world sizes differ"):
        load_run(root)


def test_corrupt_rank_fails_naming_that_file(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    (root / "rank1.json.gz").write_bytes((root / "rank1.json.gz").read_bytes()[:100])

    with pytest.raises(TracekitError, match=r"rank1\.json\.gz: truncated or corrupt gzip"):
        load_run(root, workers=2)


def test_manifest_marks_incomplete_rank_partial(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    ranks = (
        RankEntry(0, True, "rank0.json.gz", (0,), "node0", "complete"),
        RankEntry(1, False, None, (1,), "node0", "capturing", ("killed",)),
    )
    manifest = Manifest(world_size=2, complete=False, ranks=ranks)
    (root / "run.json").write_text(json.dumps(manifest.to_json()))

    run = load_run(root)

    assert run.partial
    assert any("rank 1 did not complete its capture: killed" in warning for warning in run.warnings)


def test_cached_load_starts_no_worker_processes(tmp_path: Path, make_trace, monkeypatch) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    first = load_run(root, workers=2)

    def no_pool(*args, **kwargs):
        raise AssertionError("a cached load must not start worker processes")

    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", no_pool)  # imported where a pool starts
    second = load_run(root, workers=2)

    assert second.events.equals(first.events)


def _name_runs(root: Path, run_ids: tuple[str, ...]) -> None:
    """Give each rank's trace the ``traceName`` an older collector wrote: its run's incoming directory."""
    for rank, run_id in enumerate(run_ids):
        path = root / f"rank{rank}.json.gz"
        document = json.loads(gzip.decompress(path.read_bytes()))
        document["traceName"] = f"/jobs/out/{INCOMING_PREFIX}{run_id}/rank{rank}.json"
        path.write_bytes(gzip.compress(json.dumps(document).encode()))


def test_a_load_reads_each_trace_once_its_run_id_with_its_events(tmp_path: Path, make_trace, monkeypatch) -> None:
    # An older trace names its run only in its traceName, at the end of its text: the reader finds
    # it there, in the text it decodes, rather than reading the file a second time.
    root = _two_ranks(tmp_path / "run", make_trace)
    _name_runs(root, ("c3" * 8, "c3" * 8))
    reads: list[Path] = []
    real = kineto.read_bytes

    def counted(path: Path):
        reads.append(path)
        return real(path)

    monkeypatch.setattr(kineto, "read_bytes", counted)
    first = load_run(root, workers=1)
    second = load_run(root, workers=1)

    assert sorted(path.name for path in reads) == ["rank0.json.gz", "rank1.json.gz"]
    assert {info.run_id for info in first.traces} == {info.run_id for info in second.traces} == {"c3" * 8}


@pytest.mark.parametrize("cached", [False, True])
def test_two_runs_named_only_by_their_trace_names_are_refused(tmp_path: Path, make_trace, cached: bool) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    if cached:
        _name_runs(root, ("d4" * 8, "d4" * 8))
        load_run(root, workers=1)
    _name_runs(root, ("d4" * 8, "e5" * 8))

    with pytest.raises(TracekitError, match="two runs mixed.*run d4d4d4d4.*run e5e5e5e5"):
        load_run(root, workers=1)


def test_a_rewritten_trace_is_read_again_for_its_run_id(tmp_path: Path, make_trace) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    load_run(root, workers=1)
    for rank, run_id in enumerate(("a1" * 8, "b2" * 8)):
        path = root / f"rank{rank}.json.gz"
        document = json.loads(gzip.decompress(path.read_bytes()))
        path.write_bytes(gzip.compress(json.dumps({RUN_ID_METADATA: run_id, **document}).encode()))

    with pytest.raises(TracekitError, match="two runs mixed"):
        load_run(root, workers=1)


def test_rank_events_and_restricted_views_read_one_rank_or_some_categories(
    tmp_path: Path, make_trace
) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    run = load_run(root)

    rank1 = run.rank_events(1).collect()
    labels = run.restricted(("user_annotation",))

    assert rank1.equals(run.events.filter(run.events["rank"] == 1))
    assert set(labels.events["cat"].unique()) == {"user_annotation"}
    assert labels.events.height == run.events.filter(run.events["cat"] == "user_annotation").height
    assert (labels.root, labels.ranks, labels.tables) == (run.root, run.ranks, run.tables)


@pytest.mark.parametrize(
    ("edit", "fault"),
    [
        (lambda m: m.pop("world_size"), r"world_size: missing"),
        (lambda m: m.update(format="tracekit-run/9"), r"format 'tracekit-run/9' is not 'tracekit-run/1'"),
        (lambda m: m["ranks"][1].update(status="done"), r"ranks\[1\]\.status: expected one of .*got 'done'"),
        (lambda m: m["ranks"][0].update(complete="yes"), r"ranks\[0\]\.complete: expected true or false"),
        (lambda m: m.update(world_size=3), r"world_size 3 but 2 rank entries"),
        (lambda m: m["schedule"].update(pp_size=None), r"schedule\.pp_size: expected an integer, got null"),
        (lambda m: m.update(rank_to_stages={"x": [0]}), r"rank_to_stages: key 'x' is not an integer"),
        (lambda m: m.update(pipelines=2), r"pipelines: unknown field"),
    ],
    ids=["missing", "version", "status", "type", "world", "null", "key", "unknown"],
)
def test_a_malformed_manifest_fails_in_one_line_naming_file_and_field(
    tmp_path: Path, make_trace, edit, fault: str
) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    manifest = json.loads((SAMPLES / "1f1b" / "run.json").read_text())
    manifest["world_size"], manifest["ranks"] = 2, manifest["ranks"][:2]
    manifest["rank_to_stages"] = {"0": [0], "1": [1]}
    edit(manifest)
    (root / "run.json").write_text(json.dumps(manifest))

    with pytest.raises(TracekitError, match=rf"run\.json: malformed manifest: {fault}") as caught:
        load_run(root)

    assert "\n" not in str(caught.value)


def test_every_sample_manifest_reads_and_writes_back_unchanged() -> None:
    for path in sorted(SAMPLES.glob("*/run.json")):
        payload = json.loads(path.read_text())

        written = parse_manifest(payload).to_json()

        # fields added since a sample was captured come back at their defaults; the rest unchanged
        assert {key: written[key] for key in payload} == payload, path
        assert parse_manifest(written) == parse_manifest(payload), path
