"""The one ideal: a straggler's pace never sets its own ideal, nor its peers'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from whatif.simulated_runs import simulated_actions

from tracekit.analysis.ideal import IDEAL_SCHEMA, IdealConfig, ideal_durations, stage_costs
from tracekit.whatif.pipeline import pipeline_case


def _ideal(name: str, slow_rank: int | None = None, factor: float = 1.0, method: str = "robust"):
    case, _ = pipeline_case(simulated_actions(name, slow_rank=slow_rank, factor=factor, steps=3), name)
    return case, ideal_durations(case.ops, method)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "slow_rank"), [("1f1b", 1), ("1f1b", 2), ("dualpipev", 2), ("zbv", 0)])
def test_a_stragglers_slowness_sets_nobodys_ideal(name: str, slow_rank: int) -> None:
    _, clean = _ideal(name)
    _, slowed = _ideal(name, slow_rank=slow_rank, factor=3.0)

    key = ["rank", "stage", "optype", "work"]
    joined = clean.table.join(slowed.table, on=key, suffix="_slowed")

    assert joined.height == clean.table.height
    np.testing.assert_allclose(joined["ideal_ms_slowed"], joined["ideal_ms"], rtol=1e-9)
    straggler = joined.filter(
        (pl.col("rank") == slow_rank) & (pl.col("own_median_ms_slowed") > pl.col("own_median_ms"))
    )
    assert straggler.height >= 2
    assert (straggler["own_median_ms_slowed"] > 2 * straggler["ideal_ms_slowed"]).all()


def test_basis_names_the_rule_that_set_each_ideal() -> None:
    _, ideal = _ideal("1f1b", slow_rank=2, factor=2.0)

    basis = {(r, o): b for r, o, b in ideal.table.select("rank", "optype", "basis").iter_rows()}

    # 4-rank 1F1B: ranks 1 and 2 do the middle stages' work; ranks 0 and 3 (first, last) have no peer.
    assert basis[(1, "F")] == basis[(2, "F")] == "peers"
    assert basis[(0, "F")] == basis[(3, "B")] == "other ranks"
    assert dict(ideal.table.schema) == IDEAL_SCHEMA


def test_per_op_durations_follow_the_ops_order() -> None:
    case, ideal = _ideal("zbv", slow_rank=1, factor=2.0)

    key = ["rank", "stage", "optype", "work"]
    lookup = {row[:4]: row[4] for row in ideal.table.select(*key, "ideal_ms").iter_rows()}
    expected = [lookup[row] for row in case.ops.select(key).iter_rows()]

    assert ideal.per_op(case.ops).tolist() == expected


def test_osdi25_is_the_mean_per_op_type_over_every_instance() -> None:
    case, ideal = _ideal("1f1b", slow_rank=2, factor=2.0, method="osdi25")

    means = dict(case.ops.group_by("optype").agg(pl.col("duration_ms").mean()).iter_rows())

    assert ideal.per_op(case.ops).tolist() == pytest.approx([means[o] for o in case.ops["optype"].to_list()])


def test_stage_costs_give_the_simulator_the_same_ideal() -> None:
    case, ideal = _ideal("1f1b", slow_rank=2, factor=2.0)

    costs = stage_costs(ideal, case.ops, 4)

    assert costs.forward == pytest.approx((2.0,) * 4) and costs.full_backward == pytest.approx((3.0,) * 4)


def test_the_default_method_depends_on_the_input() -> None:
    assert IdealConfig().method_for("op-table") == "osdi25"
    assert IdealConfig().method_for("kineto") == "robust"
    assert IdealConfig(method="robust").method_for("op-table") == "robust"
    with pytest.raises(ValueError, match="robust or osdi25"):
        IdealConfig(method="mean")  # type: ignore[arg-type]


@pytest.mark.parametrize("sample", ["1f1b", "dualpipev-straggler", "deepseek-dualpipe"])
def test_an_ideal_is_never_slower_than_what_the_rank_did(sample: str) -> None:
    from tracekit.run_analysis import analyse

    analysis = analyse(Path(__file__).resolve().parents[2] / "sample_traces" / sample)

    table = analysis.ideal.table

    assert (table["ideal_ms"] <= table["own_median_ms"]).all()
    assert set(table["basis"].to_list()) <= {"peers", "expected", "other ranks", "own steps"}
