"""Pipeline groups: the layout option, run.json's groups, and each rank's replica and pipeline rank."""

from __future__ import annotations

import polars as pl
import pytest

from collectors.manifest import Manifest
from tracekit.analysis.pipelines import (
    ONE_PIPELINE,
    PipelineGroups,
    PipelineLayout,
    resolve_groups,
    with_replicas,
)
from tracekit.errors import TracekitError


@pytest.mark.parametrize(
    ("text", "groups"),
    [
        ("contiguous:4", ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("strided:4", ((0, 2, 4, 6), (1, 3, 5, 7))),
        ("contiguous:8", ((0, 1, 2, 3, 4, 5, 6, 7),)),
        ("strided:2", ((0, 4), (1, 5), (2, 6), (3, 7))),
    ],
)
def test_layouts_place_pipelines_on_ranks(text: str, groups: tuple[tuple[int, ...], ...]) -> None:
    layout = PipelineLayout.parse(text)

    assert layout.groups(8) == groups and str(layout) == text


@pytest.mark.parametrize("text", ["contiguous", "blocked:4", "strided:x", "contiguous:0", "4"])
def test_a_malformed_layout_says_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="contiguous:P or strided:P|at least one rank"):
        PipelineLayout.parse(text)


def _manifest(groups: tuple[tuple[int, ...], ...] | None) -> Manifest:
    return Manifest(world_size=0, complete=False, ranks=(), pipeline_groups=groups)


def test_run_json_groups_give_each_rank_its_replica_and_pipeline_rank() -> None:
    groups, warnings = resolve_groups(
        _manifest(((0, 2, 4, 6), (1, 3, 5, 7))), None, 8, tuple(range(8)), "run"
    )

    assert groups.source == "run.json" and warnings == ()
    assert [groups.replica(rank) for rank in range(8)] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [groups.pipeline_rank(rank) for rank in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_layout_overrides_run_json_and_says_so() -> None:
    layout = PipelineLayout.parse("contiguous:4")

    groups, warnings = resolve_groups(
        _manifest(((0, 2, 4, 6), (1, 3, 5, 7))), layout, 8, tuple(range(8)), "run"
    )

    assert groups.groups == ((0, 1, 2, 3), (4, 5, 6, 7)) and groups.source == "--pipelines contiguous:4"
    assert len(warnings) == 1 and "overrides the pipeline groups run.json names" in warnings[0]


def test_without_groups_every_rank_is_one_pipeline() -> None:
    groups, _ = resolve_groups(_manifest(None), None, 8, tuple(range(8)), "run")

    assert groups is ONE_PIPELINE and not groups.known and groups.replicas == 1
    assert groups.replica(5) == 0 and groups.pipeline_rank(5) == 5


def test_a_layout_that_does_not_divide_the_ranks_is_refused_naming_the_run() -> None:
    with pytest.raises(
        TracekitError, match=r"^run: --pipelines contiguous:4: 6 ranks do not form pipelines of 4"
    ):
        resolve_groups(None, PipelineLayout.parse("contiguous:4"), 6, tuple(range(6)), "run")


def test_a_rank_outside_run_json_groups_is_refused_with_the_option_named() -> None:
    with pytest.raises(
        TracekitError, match=r"run\.json: rank 4 is in no pipeline group of run\.json: pass --pipelines"
    ):
        resolve_groups(_manifest(((0, 1), (2, 3))), None, 5, tuple(range(5)), "run")


def test_the_replica_column_follows_the_rank() -> None:
    actions = pl.DataFrame(
        {"rank": [0, 5, 3], "step": [0, 0, 0]}, schema={"rank": pl.Int32(), "step": pl.Int32()}
    )

    out = with_replicas(actions, PipelineGroups(((0, 1, 2, 3), (4, 5, 6, 7)), "test"))

    assert out.columns == ["rank", "replica", "step"] and out["replica"].to_list() == [0, 1, 0]
    assert out.schema["replica"] == pl.Int32()
    assert with_replicas(actions, ONE_PIPELINE)["replica"].to_list() == [0, 0, 0]
