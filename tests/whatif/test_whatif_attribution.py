"""The what-if worker score is defined for ranks holding several stages, whatever the row order."""

from __future__ import annotations

import pytest
from whatif.simulated_runs import simulated_actions

from tracekit.whatif.attribution import what_if, worker_scores
from tracekit.whatif.pipeline import pipeline_case


@pytest.mark.parametrize("slow_rank", [0, 1, 3])
def test_a_rank_with_two_stages_is_scored_by_its_worst_stage(slow_rank: int) -> None:
    case, _ = pipeline_case(simulated_actions("dualpipev", slow_rank=slow_rank, factor=2.0), "dualpipev")
    result = what_if(case)
    stages = {
        rank: sorted(case.ops.filter(case.ops["rank"] == rank)["stage"].unique().to_list())
        for rank in range(4)
    }

    scores = worker_scores(case, result.by_dp_rank, result.by_stage)

    assert all(len(held) == 2 for held in stages.values())  # DualPipeV: stages r and 2P - 1 - r
    for rank, held in stages.items():
        assert scores[rank] == min(result.by_dp_rank[0], max(result.by_stage[stage] for stage in held))
    assert max(scores, key=lambda rank: (scores[rank], -rank)) == slow_rank


def test_the_worker_score_does_not_depend_on_the_order_of_the_ops() -> None:
    case, _ = pipeline_case(simulated_actions("dualpipev", slow_rank=2, factor=2.0), "dualpipev")
    result = what_if(case)
    reversed_case = type(case)(
        graph=case.graph, ops=case.ops.reverse(), measured=case.measured, source=case.source
    )

    assert worker_scores(reversed_case, result.by_dp_rank, result.by_stage) == worker_scores(
        case, result.by_dp_rank, result.by_stage
    )
