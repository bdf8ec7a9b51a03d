"""From tables and runs to the page: the ideal replay, the sections, what is omitted and why, and scale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from collectors.manifest import Manifest, RunSchedule
from dashboards.build import (
    DashboardConfig,
    build_page,
    ideal_timeline,
    overlap_section,
    sections_from_actions,
    straggler_section,
)
from dashboards.encoding import MAX_ROWS
from dashboards.page import Page, render_html
from dashboards.timeline import from_realized
from tracekit.errors import TracekitError
from tracekit.run_analysis import RunAnalysis
from tracekit.analysis.pipelines import pipeline_positions as pipeline_layout
from tracekit.trace.run import load_run

SAMPLE_TRACES = Path(__file__).resolve().parents[2] / "sample_traces"


def _manifest_of(name: str, pp: int, microbatches: int) -> Manifest:
    """A run.json naming the schedule the run followed (ranks left out: the builder reads the schedule)."""
    schedule = RunSchedule(name, name, pp_size=pp, num_stages=pp, microbatches=microbatches, paths=())
    return Manifest(world_size=0, complete=False, ranks=(), schedule=schedule)


def test_layout_finds_pipeline_replicas(simulated_run) -> None:
    actions = simulated_run("1f1b", pp=4, microbatches=4, replicas=2)

    layout = pipeline_layout(actions)

    assert layout["replica"].to_list() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert layout["position"].to_list() == [0, 1, 2, 3, 0, 1, 2, 3]


def test_layout_refuses_uneven_replicas(simulated_run) -> None:
    actions = simulated_run("1f1b", pp=4, microbatches=4, replicas=2).filter(pl.col("rank") != 7)

    with pytest.raises(TracekitError, match="equal pipeline replicas"):
        pipeline_layout(actions)
    timeline, utilization, comparison = sections_from_actions(actions, None, DashboardConfig())
    # The ideal replays the recorded graph, whatever the replicas; only the sweep needs one P.
    assert timeline.views and utilization.views
    assert comparison.views == ()
    assert comparison.notes == (
        "comparison unavailable: ranks do not form equal pipeline replicas: "
        "stages 0 on 2 ranks, stages 1 on 2 ranks, stages 2 on 2 ranks, stages 3 on 1 ranks",
    )


@pytest.mark.parametrize("schedule", ["1f1b", "zbv", "dualpipev"])
def test_the_ideal_timeline_of_a_run_without_stragglers_is_the_run(simulated_run, schedule: str) -> None:
    actions = simulated_run(schedule, pp=4, microbatches=8, replicas=2)
    analysis = RunAnalysis.of_actions(actions)

    timeline = ideal_timeline(analysis.ideal_timeline, [0])

    key = ["rank", "stage", "kind", "microbatch"]
    realized = from_realized(actions, int(actions["start_ns"].min())).sort(key)  # type: ignore[arg-type]
    replayed = timeline.sort(key)
    assert replayed.select(key).equals(realized.select(key))
    assert np.allclose(replayed["start_ms"], realized["start_ms"], atol=1e-5)
    assert np.allclose(replayed["end_ms"], realized["end_ms"], atol=1e-5)
    assert analysis.ideal_timeline.utilization.per_rank.equals(analysis.utilization.per_rank)


def test_ideal_replay_uses_median_costs_so_a_straggler_disappears(simulated_run) -> None:
    actions = simulated_run("1f1b", pp=4, microbatches=8, replicas=3, slow_rank=5, factor=2.0)

    timeline, _utilization, _ = sections_from_actions(actions, None, DashboardConfig())

    rows = timeline.views[0].spec["datasets"]
    (bars,) = rows.values()
    ends = {t: max(row["end_ms"] for row in bars if row["timeline"] == t) for t in ("realized", "ideal")}
    # 1F1B at F = 2, B = 3 ms: (M + P - 1)(F + B) = 55 ms; the slow replica stretches the realized step.
    assert ends["ideal"] == pytest.approx(55.0)
    assert ends["realized"] > 60.0


def test_all_steps_lay_the_ideal_steps_back_to_back(simulated_run) -> None:
    actions = simulated_run("1f1b", pp=4, microbatches=8, steps=2)

    timeline, _, _ = sections_from_actions(actions, None, DashboardConfig(all_steps=True))

    (bars,) = timeline.views[0].spec["datasets"].values()
    assert max(row["end_ms"] for row in bars if row["timeline"] == "ideal") == pytest.approx(2 * 55.0)
    assert "steps 0-1 (2 steps)" in timeline.views[0].spec["title"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"step": 5}, r"step 5 is not in the run \(steps \[0, 1\]\)"),
        ({"step": 0, "all_steps": True}, "one step or all steps"),
    ],
)
def test_bad_step_choices_are_user_errors(simulated_run, config: dict, message: str) -> None:
    actions = simulated_run("1f1b", pp=4, microbatches=8, steps=2)

    with pytest.raises(TracekitError, match=message):
        sections_from_actions(actions, None, DashboardConfig(**config))


def test_a_step_missing_an_action_is_replayed_without_it(simulated_run) -> None:
    actions = simulated_run("1f1b", pp=4, microbatches=8)
    incomplete = actions.filter(
        ~((pl.col("rank") == 3) & (pl.col("microbatch") == 7) & (pl.col("kind") == "B"))
    )
    analysis = RunAnalysis.of_actions(incomplete)

    timeline, utilization, comparison = sections_from_actions(incomplete, None, DashboardConfig())

    assert any("absent from the trace" in warning for warning in analysis.replay.warnings)
    (bars,) = timeline.views[0].spec["datasets"].values()
    ideal = [row for row in bars if row["timeline"] == "ideal"]
    assert len(ideal) == incomplete.height
    assert utilization.views and comparison.views


def test_sample_run_with_a_straggler(tmp_path: Path) -> None:
    run = load_run(SAMPLE_TRACES / "dualpipev-straggler")

    page = build_page(RunAnalysis.of_run(run))

    assert [section.key for section in page.sections] == [
        "timeline",
        "utilization",
        "overlap",
        "stragglers",
        "memory",
        "comparison",
    ]
    assert [view.key for view in page.views] == [
        "timeline",
        "utilization",
        "stragglers",
        "whatif",
        "comparison",
    ]
    overlap = page.sections[2]
    assert overlap.notes == ("no GPU events in this run: communication / compute overlap needs GPU kernels",)
    (cells,) = page.views[2].spec["datasets"].values()
    # The capture slowed rank 2 by 5 ms per action: the heatmap outlines what tracekit stragglers
    # names, rank 2 on its slowest kind, and nothing else.
    assert [row["worst_rank"] for row in cells if row["flagged"]] == [2]
    # The bubble view marks the same rank, so its small bubble is not read as the best use.
    (bubbles,) = page.views[1].spec["datasets"].values()
    assert {row["rank"] for row in bubbles if row["straggler_ms"] is not None} == {2}
    assert ("schedule", "dualpipev (P = 4, 8 stages, 8 micro-batches)") in page.facts


def synthetic_tables(ranks: int, slow_rank: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Straggler scores, what-if attribution and overlap tables of ``ranks`` ranks, one of them slow."""
    rng = np.random.default_rng(0)
    kinds = ["F", "B"]
    median = rng.uniform(0.95, 1.05, ranks * len(kinds))
    median[slow_rank * len(kinds)] = 2.0
    scores = pl.DataFrame(
        {
            "rank": np.repeat(np.arange(ranks, dtype=np.int32), len(kinds)),
            "kind": kinds * ranks,
            "reference": ["peers"] * (ranks * len(kinds)),
            "median_ms": median,
            "reference_ms": np.ones(ranks * len(kinds)),
            "score": 1 / median,
            "pattern": ["none"] * (ranks * len(kinds)),
            "flagged": [index == slow_rank * len(kinds) for index in range(ranks * len(kinds))],
        }
    )
    attribution = pl.DataFrame(
        {
            "dimension": ["optype"] * 2 + ["rank"] * ranks,
            "group": kinds + [str(rank) for rank in range(ranks)],
            "slowdown": np.concatenate([[1.3, 1.1], rng.uniform(1.0, 1.2, ranks)]),
        }
    )
    classes = ["p2p", "dp_collective", "ep_dispatch"]
    comm = rng.uniform(1.0, 10.0, ranks * len(classes))
    overlap = pl.DataFrame(
        {
            "rank": np.repeat(np.arange(ranks, dtype=np.int32), len(classes)),
            "comm_class": classes * ranks,
            "comm_ms": comm,
            "overlapped_ms": comm * rng.uniform(0, 1, comm.size),
        }
    )
    return scores, attribution, overlap


def test_a_2048_rank_run_builds_into_a_page_under_20_mb(simulated_run) -> None:
    actions = simulated_run("1f1b", pp=8, microbatches=16, replicas=256, steps=2, slow_rank=1234, factor=1.5)
    scores, attribution, overlap = synthetic_tables(2048, slow_rank=1234)
    sections = sections_from_actions(actions, _manifest_of("1f1b", pp=8, microbatches=16), DashboardConfig())
    sections += (overlap_section(overlap, None), straggler_section(scores, attribution, 1.15, 0.75))
    page = render_html(Page("2048 ranks", sections=sections))

    size = len(page.encode())
    assert size < 20e6, f"{size / 1e6:.1f} MB"
    timeline = sections[0].views[0]
    assert timeline.renderer == "canvas" and timeline.spec["spec"]["mark"]["type"] == "rect"
    for section in sections:
        for view in section.views:
            assert all(len(rows) <= MAX_ROWS for rows in view.spec.get("datasets", {}).values())
    (cells,) = sections[4].views[0].spec["datasets"].values()
    assert [row["worst_rank"] for row in cells if row["slowdown"] > 1 / 0.75] == [1234]


def test_a_gpu_run_without_schedule_labels_shows_its_overlap_and_says_what_is_missing(shared: Path) -> None:
    run = load_run(shared / "traces" / "param-dlrm-8rank")

    page = build_page(RunAnalysis.of_run(run))

    assert [view.key for view in page.views] == ["overlap"]
    missing = {section.key: section.notes for section in page.sections if not section.views}
    assert set(missing) == {"timeline", "utilization", "stragglers", "comparison"}
    assert all(notes[0].startswith("no schedule labels in this run") for notes in missing.values())
    (cells, totals) = page.views[0].spec["datasets"].values()
    assert {row["comm_class"] for row in cells} == {"all", "dp_collective", "p2p"}
    assert {row["ranks"] for row in cells} == {str(rank) for rank in range(8)}
    assert all(0 <= row["overlap_fraction"] <= 1 for row in cells)
    assert {row["comm_class"] for row in totals} == {"dp_collective", "p2p"}  # "all" would count twice
