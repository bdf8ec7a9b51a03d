"""References and the robust ideal, taken by lookup per rank, equal their definitions (a scan of every other rank)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from stragglers.test_stragglers_scoring import equal_work
from whatif.simulated_runs import simulated_actions

from tracekit.analysis.ideal import IDEAL_SCHEMA, action_ops, ideal_durations
from tracekit.analysis.references import expected_cost, own_medians, references
from tracekit.analysis.work import empty_stage_work
from tracekit.whatif.pipeline import pipeline_case


def _robust_by_definition(ops: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """Each op's own median against its reference by definition, as ``tracekit.analysis.ideal`` says."""
    medians = own_medians(ops, [])
    found = _references_by_definition(medians, work)
    rows = []
    for row in medians.iter_rows(named=True):
        key = (row["rank"], row["stage"], row["kind"], row["work"])
        basis, count, reference = found[key]
        own = row["median_ms"]
        if basis == "history":
            per_rank: dict[int, list[float]] = {}
            for other in medians.iter_rows(named=True):
                if other["kind"] == row["kind"] and other["rank"] != row["rank"]:
                    per_rank.setdefault(other["rank"], []).append(other["median_ms"])
            count, basis = 0, "other ranks" if per_rank else "own steps"
            reference = float(np.median([sum(v) / len(v) for v in per_rank.values()])) if per_rank else None
        ideal = own if reference is None else min(own, reference)
        rows.append((*key[:2], row["kind"], row["work"], ideal, own, count, basis))
    return pl.DataFrame(rows, schema=IDEAL_SCHEMA, orient="row").sort("rank", "stage", "optype", "work")


def _references_by_definition(medians: pl.DataFrame, stage_work: pl.DataFrame) -> dict[tuple, tuple]:
    work = dict(zip(stage_work["stage"].to_list(), stage_work["work"].to_list()))
    shape = {
        s: (p, layers) for s, p, layers in stage_work.select("stage", "compute_params", "layers").iter_rows()
    }
    out = {}
    for _, group in medians.group_by("kind", maintain_order=True):
        ranks, stages, roles, values = (group[c].to_list() for c in ("rank", "stage", "work", "median_ms"))
        for index, (rank, stage, role) in enumerate(zip(ranks, stages, roles)):
            others = [j for j in range(len(ranks)) if ranks[j] != rank]
            replicas = [j for j in others if stages[j] == stage] or [
                j for j in others if roles[j] == role and shape.get(stages[j]) == shape.get(stage)
            ]
            found: tuple = ("history", 0, None)
            if replicas:
                found = (
                    "peers",
                    len({ranks[j] for j in replicas}),
                    float(np.median([values[j] for j in replicas])),
                )
            elif stage in work and others and all(stages[j] in work and work[stages[j]] > 0 for j in others):
                cost = expected_cost([(values[j], work[stages[j]]) for j in others], work[stage])
                found = ("expected", len({ranks[j] for j in others}), cost)
            out[(rank, stage, group["kind"][index], role)] = found
    return out


CASES = [("1f1b", 4, None), ("zbv", 4, 2), ("dualpipev", 4, 1), ("1f1b", 2, 0)]


@pytest.mark.parametrize(("name", "pp", "slow_rank"), CASES)
@pytest.mark.parametrize("with_work", [True, False])
def test_references_equal_their_definition(
    name: str, pp: int, slow_rank: int | None, with_work: bool
) -> None:
    case, _ = pipeline_case(simulated_actions(name, pp=pp, steps=3, slow_rank=slow_rank, factor=1.7), name)
    medians = own_medians(case.ops.filter(pl.col("compute")), [])
    work = equal_work(name, pp) if with_work else empty_stage_work()

    found = references(medians, work, [])

    got = {
        (row["rank"], row["stage"], row["kind"], row["work"]): (
            row["reference"],
            row["references"],
            row["reference_ms"],
        )
        for row in found.iter_rows(named=True)
    }
    assert got == _references_by_definition(medians, work)


@pytest.mark.parametrize(("name", "pp", "slow_rank"), CASES)
@pytest.mark.parametrize("with_work", [True, False])
def test_the_robust_ideal_equals_its_definition(name: str, pp: int, slow_rank: int | None, with_work: bool) -> None:
    ops = action_ops(simulated_actions(name, pp=pp, steps=3, slow_rank=slow_rank, factor=1.7))
    work = equal_work(name, pp) if with_work else empty_stage_work()

    table = ideal_durations(ops, "robust", work).table

    assert table.to_dicts() == _robust_by_definition(ops, work).to_dicts()
