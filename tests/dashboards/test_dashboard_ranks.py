"""The rank section at 2,048 ranks of a real capture's replicas: aggregates, the costliest ranks, any rank."""

from __future__ import annotations

import polars as pl
import pytest

from dashboards.build import DashboardConfig, build_page
from dashboards.page import render_html
from dashboards.ranks import PICKER_MAX_BYTES, picker_rows
from dashboards.timeline import from_realized


@pytest.fixture(scope="module")
def large(replicated_capture):
    """(analysis, page, html) of 512 replicas of the bundled 1F1B capture: 2,048 ranks."""
    analysis = replicated_capture("1f1b", 512)
    page = build_page(analysis, DashboardConfig())
    return analysis, page, render_html(page)


def test_a_2048_rank_page_stays_under_10_mb_with_every_section(large) -> None:
    analysis, page, html = large

    assert analysis.actions["rank"].n_unique() == 2048
    assert len(html.encode()) < 10e6, f"{len(html.encode()) / 1e6:.1f} MB"
    assert [section.key for section in page.sections] == [
        "timeline",
        "ranks",
        "utilization",
        "overlap",
        "stragglers",
        "memory",
        "comparison",
    ]
    ranks = next(section for section in page.sections if section.key == "ranks")
    assert [view.key for view in ranks.views] == [
        "rank-steps",
        "rank-bubbles",
        "rank-costliest",
        "rank-any",
        "critical-path",
    ]


def test_the_costliest_ranks_are_the_highest_priced(large) -> None:
    analysis, page, _ = large

    view = next(view for view in page.views if view.key == "rank-costliest")
    (rows,) = view.spec["datasets"].values()

    priced = analysis.stragglers.ranks.sort(["saving_ms", "rank"], descending=[True, False])
    assert {row["rank"] for row in rows} == set(priced["rank"].head(8).to_list())


def test_any_rank_can_be_opened_with_its_own_actions(large) -> None:
    analysis, page, _ = large
    step = int(analysis.actions["step"].min())  # type: ignore[arg-type]
    shown = analysis.actions.filter(pl.col("step") == step)

    rows = picker_rows(from_realized(shown, int(shown["start_ns"].min())))  # type: ignore[arg-type]

    view = next(view for view in page.views if view.key == "rank-any")
    assert view.spec["params"][0]["bind"]["input"] == "number"
    assert rows["rank"].to_list() == list(range(2048))
    singles = shown.filter(~pl.col("overlapped")).group_by("rank").len().sort("rank")
    assert rows["a"].list.len().to_list() == singles["len"].to_list()  # 1F1B runs no overlapped pairs
    assert sum(len(str(value)) for value in rows.to_dicts()) < PICKER_MAX_BYTES


def test_the_critical_path_ends_where_the_recorded_step_ends(large) -> None:
    analysis, _, _ = large

    path = analysis.critical_path

    last = path.group_by("step").agg(pl.col("end_ms").max()).sort("step")["end_ms"].to_numpy()
    assert last == pytest.approx(analysis.case.measured_ms(), abs=1e-6)
    # Each action is drawn from the end of its gap: no action on the path starts before the one it waited for ended.
    ordered = path.sort("step", "position")
    waits = ordered.with_columns(pl.col("end_ms").shift(1).over("step").alias("before")).drop_nulls("before")
    assert (waits["start_ms"] >= waits["before"] - 1e-9).all()
    # The path of a replicated run stays inside one replica: a pipeline of 4 ranks.
    assert path.group_by("step").agg(pl.col("rank").n_unique())["rank"].max() <= 4


def test_a_small_run_has_no_rank_section(simulated_run) -> None:
    from tracekit.run_analysis import RunAnalysis

    page = build_page(RunAnalysis.of_actions(simulated_run("1f1b", pp=4, microbatches=8)))

    assert "ranks" not in [section.key for section in page.sections]
