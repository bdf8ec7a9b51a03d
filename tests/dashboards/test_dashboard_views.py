"""Chart specs of the utilization, straggler, what-if, overlap and comparison views, from small tables."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl
import pytest

from dashboards.comparison import comparison_chart, from_sweep
from dashboards.overlap import OVERLAP_INPUT, overlap_cells, overlap_chart
from dashboards.stragglers import SCORE_INPUT, attribution_chart, heatmap_scores, slowdown_cells, straggler_heatmap
from dashboards.utilization import STRAGGLER_INPUT, UTILIZATION_SCHEMA, from_step_utilization, utilization_chart
from tracekit.schedule.sweep import ShareCosts, sweep


def datasets(spec: dict) -> list[list[dict]]:
    """The inline datasets of a spec."""
    return list(spec["datasets"].values())


def test_realized_utilization_adds_windows_and_busy_times_over_steps() -> None:
    per_step = pl.DataFrame(
        {
            "rank": [0, 0, 1],
            "step": [0, 1, 0],
            "busy_ns": [3_000_000, 5_000_000, 10_000_000],
            "window_ns": [10_000_000] * 3,
        }
    )

    frame = from_step_utilization(per_step)

    assert frame.select("rank", "busy_ms", "window_ms", "bubble_fraction").rows() == [
        (0, 8.0, 20.0, 0.6),
        (1, 10.0, 10.0, 0.0),
    ]


@pytest.mark.parametrize(("ranks", "mark"), [(8, "bar"), (100, "line")])
def test_utilization_draws_bars_for_few_ranks_and_lines_for_many(ranks: int, mark: str) -> None:
    frame = pl.DataFrame(
        [
            (timeline, rank, 1.0, 2.0, 0.5 if timeline == "realized" else 0.25)
            for timeline in ("realized", "ideal")
            for rank in range(ranks)
        ],
        schema=UTILIZATION_SCHEMA,
        orient="row",
    )

    spec = utilization_chart(frame).to_dict()

    assert spec["mark"]["type"] == mark
    assert spec["title"]["subtitle"] == "mean over ranks: realized 50.0%, ideal 25.0%"


@pytest.mark.parametrize(("ranks", "mark"), [(4, "bar"), (100, "point")])
def test_utilization_marks_the_straggler_so_its_small_bubble_is_not_read_as_best(ranks: int, mark: str) -> None:
    frame = pl.DataFrame(
        [
            (timeline, rank, 1.0, 2.0, 0.1 if rank == 2 and timeline == "realized" else 0.4)
            for timeline in ("realized", "ideal")
            for rank in range(ranks)
        ],
        schema=UTILIZATION_SCHEMA,
        orient="row",
    )
    stragglers = pl.DataFrame({"rank": [2], "saving_ms": [30.0]}, schema=STRAGGLER_INPUT)

    spec = utilization_chart(frame, stragglers=stragglers).to_dict()

    marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in spec["layer"]]
    assert mark in marks[1:]
    assert all(
        layer["transform"] == [{"filter": "isValid(datum.straggler_ms) && datum.timeline == 'realized'"}]
        for layer in spec["layer"][1:]
    )
    assert "straggler (rank 2)" in spec["title"]["subtitle"][1]
    (rows,) = datasets(spec)
    assert {row["rank"] for row in rows if row["straggler_ms"] is not None} == {2}


def scores(ranks: int, slow: dict[int, float], flagged: tuple[int, ...] = ()) -> pl.DataFrame:
    """One F row per rank, median 1 ms against a 1 ms reference, ``slow`` ranks that many times slower."""
    return pl.DataFrame(
        {
            "rank": list(range(ranks)),
            "kind": ["F"] * ranks,
            "reference": ["peers"] * ranks,
            "median_ms": [slow.get(rank, 1.0) for rank in range(ranks)],
            "reference_ms": [1.0] * ranks,
            "score": [1 / slow.get(rank, 1.0) for rank in range(ranks)],
            "pattern": ["persistent" if rank in slow else "none" for rank in range(ranks)],
            "flagged": [rank in flagged for rank in range(ranks)],
        },
        schema=SCORE_INPUT,
    )


def test_a_band_of_ranks_shows_its_worst_rank() -> None:
    cells = slowdown_cells(scores(300, {151: 2.0, 152: 1.5}), max_rows=100)

    band = cells.filter(pl.col("band") == 150).row(0, named=True)
    assert (band["ranks"], band["worst_rank"], band["slowdown"], band["pattern"]) == (
        "150-152",
        151,
        2.0,
        "persistent",
    )
    assert cells.height == 100


def test_straggler_heatmap_outlines_exactly_the_flagged_cells() -> None:
    # Rank 1 is as slow as rank 2 but not flagged (one-off, or too cheap): only rank 2 is outlined.
    spec = straggler_heatmap(scores(4, {1: 2.0, 2: 2.0}, flagged=(2,)), threshold=0.75).to_dict()

    unjudged, heat, outline = spec["layer"]
    assert unjudged["transform"] == [{"filter": "!isValid(datum.slowdown)"}]
    assert outline["transform"] == [{"filter": "datum.flagged"}]
    # colour only for slowness: from 1 (as fast as the reference) up, faster cells clamped to the pale end
    scale = heat["encoding"]["color"]["scale"]
    assert scale["domain"][0] == 1.0 and scale["clamp"] is True
    (rows,) = datasets(spec)
    assert [row["worst_rank"] for row in rows if row["flagged"]] == [2]


def test_the_colour_legend_reads_in_multiples_of_the_reference() -> None:
    spec = straggler_heatmap(scores(4, {2: 3.0}), threshold=0.75).to_dict()

    legend = spec["layer"][1]["encoding"]["color"]["legend"]
    assert legend["values"] == [1.0, 1.25, 1.5, 2.0]
    assert "×" in legend["labelExpr"]


def test_heatmap_scores_keep_the_scoring_flags() -> None:
    score_rows = scores(2, {1: 2.0}, flagged=(1,)).with_columns(pl.lit(None, pl.Int64()).alias("extra"))

    cells = heatmap_scores(score_rows)

    assert cells.columns == list(SCORE_INPUT) and cells["flagged"].to_list() == [False, True]


def test_attribution_shows_the_worst_groups_and_skips_single_group_dimensions() -> None:
    attribution = pl.DataFrame(
        {
            "dimension": ["dp_rank"] + ["rank"] * 30 + ["stage"] * 2,
            "group": ["0"] + [str(rank) for rank in range(30)] + ["0", "1"],
            "slowdown": [1.2] + [1.0 + rank / 100 for rank in range(30)] + [1.1, 1.3],
        }
    )

    spec = attribution_chart(attribution, overall=1.2, top=20).to_dict()

    titles = [panel["title"] for panel in spec["hconcat"]]
    assert titles == ["by pipeline stage", "by rank (worker) (worst 20 of 30)"]
    rank_rows = spec["datasets"][spec["hconcat"][1]["layer"][0]["data"]["name"]]
    assert len(rank_rows) == 20 and min(row["slowdown"] for row in rank_rows) == pytest.approx(1.10)


def test_overlap_bands_add_times_before_taking_the_fraction() -> None:
    overlap = pl.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "comm_class": ["p2p", "p2p", "dp_collective", "dp_collective"],
            "comm_ms": [4.0, 6.0, 2.0, 2.0],
            "overlapped_ms": [4.0, 1.0, 0.0, 1.0],
        },
        schema=OVERLAP_INPUT,
    )

    cells = overlap_cells(overlap, max_rows=1)

    assert cells.select("ranks", "comm_class", "exposed_ms", "overlap_fraction").sort(
        "comm_class"
    ).rows() == [
        ("0-1", "dp_collective", 3.0, 0.25),
        ("0-1", "p2p", 5.0, 0.5),
    ]
    spec = overlap_chart(overlap).to_dict()
    assert [panel["mark"]["type"] for panel in spec["hconcat"]] == ["rect", "bar"]


def test_comparison_draws_a_line_per_schedule_and_marks_the_run() -> None:
    rows, _ = sweep(["1f1b", "zb-h1"], [4], [4, 8], ShareCosts(f=1.0, b=1.0, w=1.0))
    markers = pl.DataFrame(
        {"label": ["1f1b: realized"], "microbatches": [8], "bubble_fraction": [0.4]},
        schema={"label": pl.String(), "microbatches": pl.Int32(), "bubble_fraction": pl.Float64()},
    )

    spec = comparison_chart(from_sweep(rows), markers, pp=4, subtitle="costs").to_dict()

    line, point, text = spec["layer"]
    assert (line["mark"]["type"], point["mark"]["type"], text["mark"]["type"]) == ("line", "point", "text")
    lines = spec["datasets"][line["data"]["name"]]
    by_schedule = {(row["schedule"], row["microbatches"]): row["bubble_fraction"] for row in lines}
    # 1F1B's bubble (P-1)/(M+P-1) with F = B = W (Zero Bubble paper, section 2).
    assert by_schedule[("1f1b", 8)] == pytest.approx(3 / 11, abs=1e-4)
    assert by_schedule[("zb-h1", 8)] < by_schedule[("1f1b", 8)]
    assert spec["datasets"][point["data"]["name"]] == [
        {"label": "1f1b: realized", "microbatches": 8, "bubble_fraction": 0.4}
    ]


def strings(value: object) -> Iterator[str]:
    """Every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def test_trace_text_reaches_the_specs_as_data_only(hostile: str) -> None:
    overlap = pl.DataFrame(
        {"rank": [0, 0], "comm_class": ["all", hostile], "comm_ms": [1.0, 1.0], "overlapped_ms": [0.5, 0.5]},
        schema=OVERLAP_INPUT,
    )
    attribution = pl.DataFrame({"dimension": ["optype"] * 2, "group": [hostile, "F"], "slowdown": [1.2, 1.1]})
    straggling = scores(2, {}).with_columns(pl.lit(hostile).alias("kind"))

    specs = [
        overlap_chart(overlap).to_dict(),
        attribution_chart(attribution, overall=1.1).to_dict(),
        straggler_heatmap(straggling, threshold=0.75).to_dict(),
    ]

    for spec in specs:
        # vega-lite turns sort lists, domains and titles into expressions: trace text must stay out of them.
        structure = {key: value for key, value in spec.items() if key != "datasets"}
        assert not any(hostile in text for text in strings(structure))
        assert hostile in set(strings(spec["datasets"]))
