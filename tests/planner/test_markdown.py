"""The Markdown report: its sections, its alternatives table, and a plan with nothing that fits."""

from __future__ import annotations

from tracekit.planner.plan import plan
from tracekit.present.plan_markdown import render

from .specs import small_spec


def test_report_has_recommendation_alternatives_copy_and_assumptions(deepseek_plan) -> None:
    report = render(deepseek_plan)
    headings = [line for line in report.splitlines() if line.startswith("#")]

    assert headings == [
        "# Pipeline plan: deepseek-v3-671b on h800-2048 (2048 GPUs)",
        "## Recommendation: dualpipe, PP16, 120 micro-batches",
        "## Alternatives",
        "## Do not fit in 80 GiB per GPU",
        "## Ruled out before simulation",
        "## DualPipe's second parameter copy",
        "## Assumptions",
    ]
    rows = [
        line for line in report.splitlines() if line.startswith("| ") and not line.startswith("| schedule")
    ]
    assert len(rows) == deepseek_plan.alternatives.height
    for rejected in deepseek_plan.rejected.iter_rows(named=True):
        assert f"- {rejected['schedule']} at PP{rejected['pp']}: {rejected['reason']}." in report
    assert "Routed experts are 97% of the model's 671.0B parameters (ep=64)" in report


def test_every_table_fits_100_columns_and_each_unfit_candidate_says_why(deepseek_plan) -> None:
    report = render(deepseek_plan)
    unfit = deepseek_plan.alternatives.filter(~deepseek_plan.alternatives["fits"])

    tables = [line for line in report.splitlines() if line.startswith("|")]
    assert tables and max(map(len, tables)) <= 100, max(tables, key=len)
    assert not unfit.is_empty()
    for row in unfit.iter_rows(named=True):
        assert f"- {row['schedule']} at PP{row['pp']}, M {row['microbatches']}: {row['note']}." in report


def test_report_without_a_feasible_plan_explains_instead() -> None:
    report = render(plan(small_spec(cluster={"gpu_memory_gib": 8.0}, sequence_length=8192)))

    assert "## No feasible plan" in report
    assert "| over (GiB) |" in report and "Why each does not fit:" in report and ": needs " in report
    assert max(len(line) for line in report.splitlines() if line.startswith("|")) <= 100
