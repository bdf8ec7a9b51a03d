"""Per-rank reductions: the same figures however they run, read back from the derived cache, redone when a trace changes."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tracekit.analysis.pipelines import PipelineLayout
from tracekit.analysis.realized import realized_schedule
from tracekit.gpu.analysis import analyse_gpu
from tracekit.gpu.kernel_classes import KERNEL_PATTERNS
from tracekit.perrank import tasks
from tracekit.perrank.engine import LocalEngine
from tracekit.present.report import report_payload
from tracekit.present.result import to_json
from tracekit.present.stragglers import stragglers_payload
from tracekit.present.whatif import whatif_payload
from tracekit.run_analysis import AnalysisConfig, RunAnalysis, analyse
from tracekit.trace.run import CACHE_DIR_NAME, load_run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
REDUCTIONS = ("rank_labels", "rank_timeline", "rank_figures")
"""The per-rank computations a task runs when its result is not in the derived cache."""


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(CACHE_DIR_NAME))
    target.chmod(0o755)  # the shared traces are read-only; the copy keeps its caches beside it
    return target


def _document(analysis: RunAnalysis) -> bytes:
    """Every figure the commands print for the run (report; stragglers and what-if when it has labels)."""
    document = to_json(report_payload(analysis))
    if analysis.has_schedule_labels:
        document += to_json(stragglers_payload(analysis)) + to_json(whatif_payload(analysis))
    return document


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of the per-rank computations run in this process (``LocalEngine(workers=1)`` runs them here)."""
    counts: Counter[str] = Counter()

    def counted(name: str) -> Callable[..., object]:
        original = getattr(tasks, name)

        def run(*args: object, **kwargs: object) -> object:
            counts[name] += 1
            return original(*args, **kwargs)

        return run

    for name in REDUCTIONS:
        monkeypatch.setattr(tasks, name, counted(name))
    return counts


@pytest.fixture(params=["dualpipev-straggler", "hta-sampled-2rank", "deepseek-v3-dualpipe-chunk"])
def run_copy(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A fresh copy (no caches) of a labelled CPU sample or of a shared GPU trace set."""
    name = request.param
    source = SAMPLES / name
    if not source.is_dir():
        source = request.getfixturevalue("shared") / "traces" / name
    return _copy(source, tmp_path / name)


def test_second_analysis_reads_the_derived_cache_and_gives_the_same_bytes(
    run_copy: Path, work: Counter[str]
) -> None:
    first = _document(analyse(run_copy, engine=LocalEngine(workers=1)))
    computed = dict(work)
    work.clear()

    second = _document(analyse(run_copy, engine=LocalEngine(workers=1)))

    assert computed["rank_labels"] == computed["rank_timeline"] >= 1
    assert sum(work.values()) == 0
    assert second == first


def test_worker_processes_give_the_figures_of_the_whole_run_analysed_here(run_copy: Path) -> None:
    reduced = analyse(run_copy, engine=LocalEngine(workers=2))
    run = load_run(run_copy, workers=1)

    labelled = realized_schedule(run) if reduced.has_schedule_labels else None
    if labelled is not None:
        assert reduced.labelled.actions.equals(labelled.actions)
        assert reduced.labelled.warnings == labelled.warnings
    assert (reduced.gpu is not None) == (run_copy.name != "dualpipev-straggler")
    if reduced.gpu is not None:
        whole = analyse_gpu(run, KERNEL_PATTERNS, None if labelled is None else labelled.actions)
        for part in ("breakdown", "streams", "overlap", "subchunks"):
            assert getattr(reduced.gpu, part).equals(getattr(whole, part)), part
        assert (reduced.gpu.unmatched_p2p, reduced.gpu.warnings) == (whole.unmatched_p2p, whole.warnings)
        projected = reduced.gpu.action_projection
        assert (projected is None) == (whole.action_projection is None)
        assert projected is None or projected.equals(whole.action_projection)


def test_worker_processes_start_only_for_what_the_cache_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy(SAMPLES / "1f1b", tmp_path / "run")
    first = _document(analyse(root, engine=LocalEngine(workers=2)))

    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run whose reductions are all cached must not start worker processes")

    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", no_pool)  # imported where a pool starts

    assert _document(analyse(root, engine=LocalEngine(workers=2))) == first


def _two_ranks(root: Path, make_trace: Callable[..., Path]) -> Path:
    root.mkdir()
    for rank in range(2):
        make_trace(
            root / f"rank{rank}.json.gz",
            [("tracekit:step#0", [f"tracekit:{rank}F0", f"tracekit:{rank}B0"])],
            rank=rank,
            world_size=2,
        )
    return root


def test_a_changed_trace_is_reduced_again_and_only_it(
    tmp_path: Path, make_trace: Callable[..., Path], work: Counter[str]
) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    assert analyse(root, engine=LocalEngine(workers=1)).labelled.actions.height == 4
    work.clear()
    make_trace(
        root / "rank1.json.gz",
        [("tracekit:step#0", ["tracekit:1F0", "tracekit:1F1", "tracekit:1B0"])],
        rank=1,
        world_size=2,
    )

    actions = analyse(root, engine=LocalEngine(workers=1)).labelled.actions

    assert work["rank_labels"] == 1
    assert sorted(actions.filter(actions["rank"] == 1)["microbatch"].to_list()) == [0, 0, 1]


@pytest.mark.parametrize("damage", ["record", "table", "digest"])
def test_a_damaged_entry_is_computed_again_never_trusted(
    tmp_path: Path, make_trace: Callable[..., Path], work: Counter[str], damage: str
) -> None:
    root = _two_ranks(tmp_path / "run", make_trace)
    first = analyse(root, engine=LocalEngine(workers=1)).labelled.actions
    work.clear()
    cache = root / CACHE_DIR_NAME
    record = next(cache.glob("rank0.json.gz.*.rank-*.derived.json"))
    actions_table = next(cache.glob("rank0.json.gz.*.rank-*.actions.parquet"))
    if damage == "record":
        record.write_text("{not json")
    elif damage == "table":
        actions_table.write_bytes(actions_table.read_bytes()[:40])
    else:  # a table that still parses but is not the one the record names
        other = next(cache.glob("rank1.json.gz.*.rank-*.actions.parquet"))
        actions_table.write_bytes(other.read_bytes())

    again = analyse(root, engine=LocalEngine(workers=1)).labelled.actions

    assert work["rank_labels"] == 1
    assert again.equals(first)


def test_labels_without_a_stage_take_their_place_in_the_pipeline_a_layout_gives(
    tmp_path: Path, make_trace: Callable[..., Path], work: Counter[str]
) -> None:
    # GPipe's labels name no stage: each rank's comes from its pipeline group, which this layout
    # gives only once the traces have said how many ranks there are.
    root = tmp_path / "run"
    root.mkdir()
    for rank in range(4):
        make_trace(
            root / f"rank{rank}.json.gz",
            [("tracekit:step#0", ["Forward 0", "Backward 0"])],
            rank=rank,
            world_size=4,
        )
    config = AnalysisConfig(pipelines=PipelineLayout.parse("contiguous:2"))

    analysis = analyse(root, config, engine=LocalEngine(workers=1))
    actions = analysis.labelled.actions

    by_rank = {row["rank"]: (row["replica"], row["stage"]) for row in actions.iter_rows(named=True)}
    assert by_rank == {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}
    assert work["rank_labels"] == 4 + 2  # ranks 2 and 3 were read as stages 2 and 3 first
    assert actions.equals(realized_schedule(load_run(root, workers=1), analysis.pipelines).actions)
