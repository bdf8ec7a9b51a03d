"""Enumeration of (depth, schedule) candidates and the reasons the others are ruled out."""

from __future__ import annotations

import pytest

from tracekit.planner.candidates import chunks_of, depths, enumerate_candidates, microbatch_problem
from tracekit.schedule.model import ScheduleError
from tracekit.schedule.registry import generate

from .specs import small_spec


def _reasons(spec) -> dict[tuple[str, int], str]:
    _, rejections = enumerate_candidates(spec)
    return {(r.schedule, r.pp): r.reason for r in rejections}


def test_depths_are_the_gpu_count_divisors_up_to_the_layers() -> None:
    assert depths(small_spec()) == [2, 4, 8, 16]
    assert depths(small_spec(pp=4)) == [4]


def test_candidates_carry_the_micro_batches_the_batch_gives() -> None:
    candidates, _ = enumerate_candidates(small_spec(pp=4, global_batch=128))

    assert {(c.name, c.pp, c.microbatches, c.dp) for c in candidates} >= {
        ("1f1b", 4, 16, 8),
        ("dualpipe", 4, 16, 8),
    }


@pytest.mark.parametrize(
    ("training", "key", "fragment"),
    [
        ({"global_batch": 48, "pp": 16}, ("dualpipe", 16), "must be even and at least 2 x pp = 32, got 24"),
        (
            {"global_batch": 48, "pp": 16},
            ("zbv", 16),
            "16 x 2 stages need at least one layer each; the model has 16",
        ),
        (
            {"global_batch": 50, "pp": 4},
            ("*", 4),
            "global batch 50 is not a multiple of dp x micro-batch size = 8 x 1",
        ),
        ({"global_batch": 64, "micro_batch_size": 3, "pp": 4}, ("*", 4), "8 x 3 = 24"),
    ],
)
def test_rejections_say_why(training: dict, key: tuple[str, int], fragment: str) -> None:
    assert fragment in _reasons(small_spec(**training))[key]


def test_dualpipe_needs_an_even_depth() -> None:
    spec = small_spec(cluster={"gpus": 24}, global_batch=48, pp=3)

    assert "the pipeline ranks (pp) must be even, got 3" in _reasons(spec)[("dualpipe", 3)]


def test_depth_that_does_not_divide_the_gpus_is_ruled_out() -> None:
    assert "32 GPUs do not split into 3 pipeline stages" in _reasons(small_spec(pp=3))[("*", 3)]


def test_expert_parallelism_must_divide_the_data_parallel_ranks(deepseek) -> None:
    spec = type(deepseek)(
        deepseek.cluster, deepseek.model, type(deepseek.training)(**(vars(deepseek.training) | {"pp": 64}))
    )

    assert "ep=64 must divide the 32 data-parallel ranks" in _reasons(spec)[("*", 64)]


@pytest.mark.parametrize(
    "name", ["1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipe", "dualpipev"]
)
def test_microbatch_rules_agree_with_the_generators(name: str) -> None:
    for pp in range(1, 7):
        for microbatches in range(1, 30):
            try:
                generate(name, pp, microbatches, chunks_of(name) if name == "interleaved-1f1b" else None)
                generated = None
            except ScheduleError as error:
                generated = str(error).removeprefix(f"{name}: ")

            assert microbatch_problem(name, pp, microbatches) == generated, (pp, microbatches)


def test_large_microbatch_counts_are_sampled_at_2pp_and_4pp() -> None:
    candidates, _ = enumerate_candidates(small_spec(pp=8, global_batch=4096))  # M = 1024: 8 x 1024 cells

    assert {c.microbatches for c in candidates} == {1024}
    assert all(c.extrapolated for c in candidates)
    assert {tuple(s.num_microbatches for s in c.schedules) for c in candidates} == {(16, 32)}
