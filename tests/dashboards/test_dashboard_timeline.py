"""The timeline view: Gantt bars (F&B pairs merged), the busy-fraction heatmap, and which one is drawn."""

from __future__ import annotations

import polars as pl
import pytest

from dashboards.timeline import (
    TIMELINE_SCHEMA,
    TimelineLimits,
    activity_cells,
    gantt_marks,
    rank_bands,
    timeline_chart,
)


def frame(rows: list[tuple]) -> pl.DataFrame:
    """Timeline rows (timeline, rank, stage, kind, microbatch, start_ms, end_ms, overlapped)."""
    return pl.DataFrame(rows, schema=TIMELINE_SCHEMA, orient="row")


def marks_of(spec: dict) -> list[str]:
    """Every mark type in a vega-lite spec, depth first."""
    found = []
    if "mark" in spec:
        mark = spec["mark"]
        found.append(mark["type"] if isinstance(mark, dict) else mark)
    for key in ("spec", "layer", "hconcat", "vconcat", "concat"):
        children = spec.get(key)
        for child in children if isinstance(children, list) else [children] if children else []:
            found += marks_of(child)
    return found


def test_gantt_marks_merge_each_overlapped_pair_into_one_fnb_bar() -> None:
    actions = frame(
        [
            ("realized", 0, 0, "F", 0, 0.0, 1.0, False),
            ("realized", 0, 1, "B", 0, 1.0, 3.0, True),  # the pair's halves, each spanning the pair
            ("realized", 0, 0, "F", 1, 1.0, 3.0, True),
            ("realized", 1, 1, "F", 0, 1.0, 2.0, False),
        ]
    )

    marks = gantt_marks(actions)

    rank0 = marks.filter(pl.col("rank") == 0).sort("start_ms")
    assert rank0["kind"].to_list() == ["F", "F&B"]
    assert rank0.row(1, named=True) == {
        "timeline": "realized",
        "rank": 0,
        "kind": "F&B",
        "action": "0F1 & 1B0",  # forward half first whatever the row order
        "microbatch": "1 & 0",
        "start_ms": 1.0,
        "end_ms": 3.0,
        "dur_ms": 2.0,
    }
    assert marks.filter(pl.col("rank") == 1)["action"].to_list() == ["1F0"]


def test_activity_cells_count_overlapping_spans_once_and_fill_idle_bins() -> None:
    actions = frame(
        [
            ("realized", 0, 0, "F", 0, 0.0, 4.0, True),
            ("realized", 0, 1, "B", 0, 2.0, 6.0, True),
            ("realized", 1, 1, "F", 0, 0.0, 8.0, False),
        ]
    )

    cells = activity_cells(actions, TimelineLimits(heatmap_bins=2, heatmap_max_bands=2))

    busy = {(row["band"], row["t0_ms"]): row["busy"] for row in cells.iter_rows(named=True)}
    assert busy == {(0, 0.0): 1.0, (0, 4.0): 0.5, (1, 0.0): 1.0, (1, 4.0): 1.0}
    assert cells["timeline"].unique().to_list() == ["realized"]  # no empty ideal panel


def test_activity_cells_average_a_band_of_ranks() -> None:
    actions = frame(
        [("ideal", rank, rank, "F", 0, 0.0, 10.0 if rank == 0 else 5.0, False) for rank in range(4)]
    )

    cells = activity_cells(actions, TimelineLimits(heatmap_bins=1, heatmap_max_bands=2))

    assert cells.select("ranks", "busy").rows() == [
        ("stage 0-1: ranks 0-1 (2)", 0.75),
        ("stage 2-3: ranks 2-3 (2)", 0.5),
    ]


def test_rank_bands_put_the_replicas_of_a_stage_together() -> None:
    # Two data-parallel replicas of a 2-stage pipeline: ranks 0 and 2 run stage 0, ranks 1 and 3 stage 1.
    actions = frame([("realized", rank, rank % 2, "F", 0, 0.0, 1.0, False) for rank in range(4)])

    bands = rank_bands(actions, max_bands=2)

    assert bands.rows() == [
        (0, 0, "stage 0: ranks 0-2 (2)"),
        (2, 0, "stage 0: ranks 0-2 (2)"),
        (1, 1, "stage 1: ranks 1-3 (2)"),
        (3, 1, "stage 1: ranks 1-3 (2)"),
    ]
    assert rank_bands(actions, max_bands=4)["ranks"].to_list() == [
        "rank 0 (stage 0)",
        "rank 2 (stage 0)",
        "rank 1 (stage 1)",
        "rank 3 (stage 1)",
    ]


@pytest.mark.parametrize(("ranks", "mark"), [(4, "bar"), (80, "rect")])
def test_timeline_is_a_gantt_up_to_the_limit_and_a_heatmap_beyond(ranks: int, mark: str) -> None:
    actions = frame(
        [
            (timeline, rank, rank, "F", 0, float(rank), rank + 1.0, False)
            for timeline in ("realized", "ideal")
            for rank in range(ranks)
        ]
    )

    spec = timeline_chart(actions, "t", TimelineLimits(gantt_max_ranks=64)).to_dict()

    assert marks_of(spec)[0] == mark
    assert spec["facet"]["row"]["sort"] == ["realized", "ideal"]  # realized above its ideal
    assert spec["resolve"]["scale"]["x"] == "independent"  # each its own time axis: the ideal is not squeezed


def test_gantt_tooltip_names_the_micro_batch() -> None:
    actions = frame([("realized", 0, 0, "F", 3, 0.0, 1.0, False), ("ideal", 0, 0, "F", 3, 0.0, 1.0, False)])

    spec = timeline_chart(actions, "t").to_dict()

    bars = spec["spec"]["layer"][0]
    assert {"field": "microbatch", "type": "nominal", "title": "micro-batch"} in bars["encoding"]["tooltip"]
    (values,) = spec["datasets"].values()
    assert {row["microbatch"] for row in values} == {"3"}
