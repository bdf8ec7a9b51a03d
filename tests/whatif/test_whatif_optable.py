"""The op-table reader and the Megatron dependency model against the OSDI'25 artifact's golden results."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tracekit.errors import TracekitError
from tracekit.whatif.attribution import WhatIfConfig, what_if
from tracekit.whatif.megatron import megatron_case
from tracekit.whatif.optable import find_meta, read_meta, read_optable

CASES = ("ST", "SE")


def _case_dir(shared: Path, name: str) -> Path:
    return shared / "traces" / f"whatif-optable-{name}"


@pytest.fixture(scope="module", params=CASES)
def artifact(request: pytest.FixtureRequest, shared: Path):
    """(our what-if result, the case, the artifact's result, ms and mw JSON) for one trace."""
    root = _case_dir(shared, request.param)
    table = read_optable(root / f"trace-{request.param}.parquet")
    case = megatron_case(table, read_meta(root / f"meta-{request.param}.yaml"), str(root))
    expected = {
        kind: json.loads((root / f"{kind}-{request.param}.json").read_text())
        for kind in ("result", "ms", "mw")
    }
    return what_if(case), case, expected


def test_replay_of_the_realized_run_matches_the_artifact_per_step(artifact) -> None:
    result, case, expected = artifact
    golden = np.array([expected["result"]["step_t_nodelay"][str(step)] for step in case.steps]) * 1e3
    measured = np.array([expected["result"]["step_t_base"][str(step)] for step in case.steps]) * 1e3

    np.testing.assert_allclose(result.realized_ms, golden, rtol=1e-5)
    np.testing.assert_allclose(result.measured_ms, measured, rtol=1e-5)
    np.testing.assert_allclose(result.ideal_ms, expected["ms"]["tideal"] * 1e3, rtol=1e-5)


def test_the_papers_replay_is_the_default_replay_on_an_op_table(artifact) -> None:
    result, case, _ = artifact
    papers = what_if(case, WhatIfConfig(replay="durations"))

    assert (case.ops["gap_ms"] == 0).all()  # an op-table's durations hold what each op occupies
    assert result.replay == "recorded" and papers.replay == "durations"
    np.testing.assert_array_equal(papers.realized_ms, result.realized_ms)
    np.testing.assert_array_equal(papers.ideal_ms, result.ideal_ms)
    assert papers.by_rank == result.by_rank and papers.mw == result.mw


def test_slowdown_matches_the_artifact_within_two_percent(artifact) -> None:
    result, _, expected = artifact

    assert result.slowdown == pytest.approx(expected["result"]["blocking_slowdown"], rel=0.02)
    assert result.slowdown == pytest.approx(
        expected["result"]["blocking_slowdown"], rel=1e-5
    )  # as reproduced
    assert result.launch_slowdown == pytest.approx(expected["result"]["launch_slowdown"], rel=1e-5)


@pytest.mark.parametrize("dimension", ["optype", "dp_rank", "stage"])
def test_attribution_ranking_and_values_match_the_artifact(artifact, dimension: str) -> None:
    result, _, expected = artifact
    golden = expected["result"][f"blocking_decompose_by_{dimension}"]
    ours = {str(key): value for key, value in getattr(result, f"by_{dimension}").items()}

    assert list(ours) == list(golden)
    assert ours == pytest.approx(golden, rel=1e-5)


@pytest.mark.parametrize("metric", ["ms", "mw"])
def test_ms_and_mw_match_the_artifact(artifact, metric: str) -> None:
    result, _, expected = artifact
    ours = getattr(result, metric)
    golden = expected[metric]

    assert ours.removed_share == pytest.approx(golden["rem"], abs=0.05)
    assert ours.removed_share == pytest.approx(golden["rem"], abs=1e-4)  # as reproduced
    assert ours.added_share == pytest.approx(golden["add"], abs=1e-4)
    assert (ours.removed_ms, ours.added_ms) == pytest.approx(
        (golden["trem"] * 1e3, golden["tadd"] * 1e3), rel=1e-5
    )


def test_per_worker_replay_names_the_long_last_stage_in_st(shared: Path) -> None:
    root = _case_dir(shared, "ST")
    case = megatron_case(read_optable(root / "trace-ST.parquet"), read_meta(root / "meta-ST.yaml"), str(root))

    result = what_if(case)

    last_stage_ranks = set(case.ops.filter(pl.col("stage") == 3)["rank"].unique().to_list())
    assert set(list(result.by_rank)[:2]) == last_stage_ranks
    assert result.ms.removed_share > 1 and result.mw.removed_share < 0.1


def test_meta_is_found_beside_the_table_and_validated(shared: Path, tmp_path: Path) -> None:
    assert find_meta(_case_dir(shared, "ST") / "trace-ST.parquet").name == "meta-ST.yaml"
    bad = tmp_path / "meta-bad.yaml"
    bad.write_text("dp_size: 2\npp_size: 4\nworld_size: 9\n")

    with pytest.raises(TracekitError, match="meta-bad.yaml: bad job metadata: world_size 9"):
        read_meta(bad)
    (tmp_path / "meta-other.yaml").write_text("dp_size: 1\npp_size: 1\n")
    with pytest.raises(TracekitError, match="pass --meta: .* found meta-bad.yaml, meta-other.yaml"):
        find_meta(tmp_path / "trace.parquet")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.drop("gmc"), r"lacks columns \['gmc'\]"),
        (lambda t: t.with_columns(pl.lit("mystery-op").alias("optype")), "does not know: \\['mystery-op'\\]"),
        (lambda t: t.with_columns(pl.lit("x").alias("duration")), "wrong type"),
    ],
)
def test_reader_refuses_malformed_tables(shared: Path, tmp_path: Path, change, message: str) -> None:
    path = tmp_path / "bad.parquet"
    change(
        pl.read_parquet(_case_dir(shared, "ST") / "trace-ST.parquet").cast({"optype": pl.String()})
    ).write_parquet(path)

    with pytest.raises(TracekitError, match=message):
        read_optable(path)


def test_model_refuses_steps_of_different_structure(shared: Path) -> None:
    root = _case_dir(shared, "ST")
    table = read_optable(root / "trace-ST.parquet")
    last = table["step"].max()
    dropped = table.filter(
        ~(
            (pl.col("step") == last)
            & (pl.col("dp_rank") == 1)
            & (pl.col("optype") == "forward-compute")
            & (pl.col("seq_id") == 3)
        )
    )

    with pytest.raises(TracekitError, match="missing or recorded twice"):
        megatron_case(dropped, read_meta(root / "meta-ST.yaml"), str(root))
