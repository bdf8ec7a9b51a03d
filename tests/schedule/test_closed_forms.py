"""Closed forms at comm = 0: Zero Bubble paper Table 2 and the DualPipe README's bubble."""

from __future__ import annotations

import pytest

from tracekit.schedule.costs import Costs
from tracekit.schedule.engine import simulate
from tracekit.schedule.metrics import Summary, summarize
from tracekit.schedule.registry import generate

COSTS = [(1.0, 1.0, 1.0), (3.0, 2.0, 1.3), (2.0, 2.5, 0.5), (1.2, 1.1, 1.1)]
"""(F, B, W): equal, F > B > W, B > F > W, W close to both; W <= min(F, B), where ZB-H1/H2's forms hold."""


def _run(
    name: str, pp: int, microbatches: int, f: float, b: float, w: float, fb: float | None = None
) -> Summary:
    schedule = generate(name, pp, microbatches)
    return summarize(simulate(schedule, Costs.uniform(schedule.num_stages, f, b, w, fb=fb)))


@pytest.mark.parametrize(("f", "b", "w"), COSTS)
@pytest.mark.parametrize(("pp", "microbatches"), [(4, 8), (8, 24), (6, 13)])
@pytest.mark.parametrize(
    ("name", "bubble"),
    [
        ("1f1b", lambda p, f, b, w: (p - 1) * (f + b + w)),
        ("zb-h1", lambda p, f, b, w: (p - 1) * (f + b - w)),
    ],
)
def test_idle_per_rank_is_table_2(
    name, bubble, pp: int, microbatches: int, f: float, b: float, w: float
) -> None:
    summary = _run(name, pp, microbatches, f, b, w)

    assert summary.ranks["idle"].to_list() == pytest.approx([bubble(pp, f, b, w)] * pp)


@pytest.mark.parametrize(("f", "b", "w"), COSTS)
@pytest.mark.parametrize(("pp", "microbatches"), [(4, 8), (8, 24), (6, 13)])
def test_zb_h2_longest_span_is_table_2(pp: int, microbatches: int, f: float, b: float, w: float) -> None:
    # ZB-H2's (p-1)(F+B-2W) is the longest rank span minus a rank's work: its ranks start one F
    # apart, so idle against the makespan is larger on all but the first rank.
    summary = _run("zb-h2", pp, microbatches, f, b, w)

    longest_span = summary.ranks["span"].max()

    assert longest_span - microbatches * (f + b + w) == pytest.approx((pp - 1) * (f + b - 2 * w))


@pytest.mark.parametrize(
    ("name", "pp", "microbatches", "f", "b", "w"),
    [
        ("zb-h1", 4, 8, 1.0, 1.2, 1.1),  # W > F
        ("zb-h1", 4, 8, 1.2, 1.0, 1.1),  # W > B
        ("zb-h2", 4, 8, 1.0, 1.2, 1.1),  # W > F
        ("zb-h2", 4, 6, 1.0, 1.0, 1.0),  # M < 2P - 1: the warm-up runs short
    ],
)
def test_zero_bubble_forms_are_not_exact_outside_their_conditions(name, pp, microbatches, f, b, w) -> None:
    summary = _run(name, pp, microbatches, f, b, w)
    h1 = summary.ranks["idle"].max() - (pp - 1) * (f + b - w)
    h2 = summary.ranks["span"].max() - microbatches * (f + b + w) - (pp - 1) * (f + b - 2 * w)

    assert (h1 if name == "zb-h1" else h2) > 1e-6


def _dualpipe_readme(stages: int, f: float, b: float, w: float, fb: float) -> float:
    # deepseek-ai/DualPipe README: (PP/2 - 1)(F&B + B - 3W), B the full backward, PP the stage count.
    return (stages / 2 - 1) * (fb + (b + w) - 3 * w)


@pytest.mark.parametrize(
    ("name", "pp", "microbatches"),
    [("dualpipe", 4, 8), ("dualpipe", 8, 16), ("dualpipe", 8, 34), ("dualpipev", 4, 8), ("dualpipev", 6, 20)],
)
@pytest.mark.parametrize(
    ("f", "b", "w", "fb"),
    [
        (1.0, 1.0, 1.0, 3.0),
        (1.0, 1.0, 1.0, 2.0),
        (2.0, 2.0, 0.5, 3.0),
        (1.0, 1.0, 0.9, 2.0),
        (1.5, 1.5, 1.5, 4.0),
    ],
)
def test_dualpipe_readme_bubble_is_the_worst_rank_when_f_equals_b(
    name, pp, microbatches, f, b, w, fb
) -> None:
    # Exact when T_F = T_B (input), T_W <= T_F and F&B >= the full backward B + W: then it is the
    # idle (makespan - busy) of the middle ranks, the worst; the outer ranks idle less unless F&B = F + B + W.
    summary = _run(name, pp, microbatches, f, b, w, fb)
    stages = generate(name, pp, microbatches).num_stages // (2 if name == "dualpipe" else 1)

    idle = summary.ranks["idle"]

    assert idle.max() == pytest.approx(_dualpipe_readme(stages, f, b, w, fb))
    if fb == f + b + w:
        assert idle.min() == pytest.approx(idle.max())


@pytest.mark.parametrize(
    ("f", "b", "w", "fb", "idle_worst"),
    [
        (2.0, 1.5, 1.0, 4.5, 13.5),  # F != B: README says 12
        (1.0, 2.0, 0.5, 3.5, 12.5),  # F != B: README says 13.5
        (1.0, 1.0, 2.0, 4.0, 6.0),  # W > F: README says 3
        (2.0, 2.0, 0.6, 1.88, 12.36),  # F&B < B + W: README says 8.04
    ],
)
def test_dualpipe_readme_bubble_is_not_exact_otherwise(f, b, w, fb, idle_worst) -> None:
    summary = _run("dualpipe", 8, 16, f, b, w, fb)

    assert summary.ranks["idle"].max() == pytest.approx(idle_worst)
    assert summary.ranks["idle"].max() != pytest.approx(_dualpipe_readme(8, f, b, w, fb))
