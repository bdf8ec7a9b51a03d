"""DeepSeek's DualPipeV (upstream source in ../shared, put first on the job's path) under ``tracekit record``.

The realized order of every rank must equal what upstream ``DualPipeV.step`` runs (replayed with
its compute recorded, tests/schedule/reference_orders.py); the overlap hook is found under either
spelling: upstream's ``overlapped_forward_backward`` and dualpipe 1.0.0's ``overlaped_``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from collector_runs import Recorded, example_job, record
from schedule.reference_orders import UPSTREAM_DUALPIPE, deepseek_dualpipe_order, deepseek_dualpipev_order

from tracekit.run_analysis import realized_actions
from tracekit.schedule.action import flatten, parse_step
from tracekit.trace.run import load_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not UPSTREAM_DUALPIPE.is_dir(), reason=f"needs upstream DualPipe at {UPSTREAM_DUALPIPE}"
    ),
]

RANKS = 2
MICROBATCHES = 6


def _record_upstream(out_dir: Path, schedule: str, *extra: str) -> Recorded:
    job = example_job(schedule, *extra, ranks=RANKS, microbatches=MICROBATCHES)
    run = record(out_dir, job, timeout_s=300, pythonpath=[UPSTREAM_DUALPIPE])
    assert run.exit_code == 0, run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def dualpipev_run(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """Steps 1-2 of upstream DualPipeV, with a forward-only call after step 1 (inside the window)."""
    return _record_upstream(tmp_path_factory.mktemp("dualpipev"), "deepseek-dualpipev", "--eval-step", "1")


def _orders(run: Recorded) -> dict[tuple[int, int], list[str]]:
    actions = realized_actions(load_run(run.out_dir, workers=1))
    return {
        (rank, step): [f"{s}{k}{m}" for s, k, m in rows.select("stage", "kind", "microbatch").iter_rows()]
        for (rank, step), rows in actions.group_by("rank", "step", maintain_order=True)
    }


def _flat(order: list[list[str]]) -> list[list[str]]:
    return [[str(action) for action in flatten([parse_step(text) for text in rank])] for rank in order]


def test_manifest_names_dualpipev_and_its_v_stages(dualpipev_run: Recorded) -> None:
    manifest = json.loads((dualpipev_run.out_dir / "run.json").read_text())

    assert manifest["complete"] and manifest["schedule"]["class"] == "DualPipeV"
    assert (manifest["schedule"]["name"], manifest["pp_size"], manifest["virtual_stages"]) == (
        "dualpipev",
        2,
        2,
    )
    assert manifest["rank_to_stages"] == {"0": [0, 3], "1": [1, 2]}
    assert manifest["pipeline_groups"] == [[0, 1]]  # DualPipeV's process group
    assert manifest["schedule"]["paths"] == [
        {"first_microbatch": 0, "stop_microbatch": MICROBATCHES, "first_stage": 0, "last_stage": 3}
    ]
    assert manifest["eval_steps"]["left_out"] == 1 and manifest["steps"]["captured"] == [1, 3]


def test_realized_order_is_upstream_step(dualpipev_run: Recorded) -> None:
    planned = _flat(deepseek_dualpipev_order(RANKS, MICROBATCHES))

    orders = _orders(dualpipev_run)

    assert sorted(orders) == [(rank, step) for rank in range(RANKS) for step in (0, 1)]
    for (rank, step), realized in orders.items():
        assert realized == planned[rank], f"rank {rank}, step {step}"


def test_each_stage_and_microbatch_runs_forward_and_backward_once(dualpipev_run: Recorded) -> None:
    actions = realized_actions(load_run(dualpipev_run.out_dir, workers=1))

    runs = actions.sort("start_ns").group_by("step", "stage", "microbatch").agg(pl.col("kind").str.join(""))

    expected = {(stage, mb) for stage in range(2 * RANKS) for mb in range(MICROBATCHES)}
    for step in (0, 1):
        assert set(runs.filter(pl.col("step") == step).select("stage", "microbatch").iter_rows()) == expected
    assert set(runs["kind"].to_list()) <= {"FB", "FIW"}


@pytest.mark.parametrize(
    ("schedule", "reference"),
    [("deepseek-dualpipev", deepseek_dualpipev_order), ("deepseek-dualpipe", deepseek_dualpipe_order)],
)
def test_upstream_overlap_hook_spelling_labels_pairs_without_halves(
    tmp_path: Path, schedule: str, reference: Callable[[int, int], list[list[str]]]
) -> None:
    run = _record_upstream(tmp_path, schedule, "--overlap-hook")

    orders = _orders(run)

    planned = _flat(reference(RANKS, MICROBATCHES))
    for (rank, step), realized in orders.items():
        assert realized == planned[rank], f"rank {rank}, step {step}"
    halves = realized_actions(load_run(run.out_dir, workers=1)).filter(pl.col("overlapped"))
    pairs = sum(text.endswith("OVERLAP_F_B") for rank in reference(RANKS, MICROBATCHES) for text in rank)
    # The hook runs both halves in one call: the reader splits each pair span, both halves spanning it.
    assert pairs > 0 and halves.height == 2 * 2 * pairs
    assert set(halves.group_by("rank", "start_ns").len()["len"].to_list()) == {2}
