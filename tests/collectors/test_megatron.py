"""Megatron-core under ``tracekit record``: a real tiny GPTModel, 2 gloo ranks on CPU, zero code change.

The realized order of every rank must equal the order Megatron's own schedule table gives
(``get_schedule_table`` and ``get_pp_rank_microbatches`` of the installed megatron-core), and each
(stage, micro-batch) must run its F and its B once per step. The interleaved run also makes a
forward-only call (an evaluation) inside the window, which must add no step and no action.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from collector_runs import Recorded, record

from tracekit.run_analysis import realized_actions
from tracekit.trace.run import load_run

pytest.importorskip("megatron.core", reason="megatron-core is in the test extra")
pytestmark = pytest.mark.slow

RANKS = 2
MICROBATCHES = 4


def megatron_order(rank: int, chunks: int) -> list[str]:
    """Rank ``rank``'s compute order as Megatron's schedule table plans it (stage = chunk * P + rank)."""
    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches, get_schedule_table

    communicator = SimpleNamespace(
        pp_group=SimpleNamespace(size=lambda: RANKS, rank=lambda: rank),
        virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None,
    )
    # microbatch_group_size_per_vp_stage defaults to the pipeline size.
    table = get_schedule_table(MICROBATCHES, chunks, RANKS)
    total, _, warmup, remaining = get_pp_rank_microbatches(
        MICROBATCHES, chunks, RANKS, p2p_communicator=communicator
    )

    def forward(k: int) -> str:
        microbatch, chunk = table[k]
        return f"{chunk * RANKS + rank}F{microbatch}"

    def backward(k: int) -> str:
        microbatch, chunk = table[k]
        return f"{(chunks - 1 - chunk) * RANKS + rank}B{microbatch}"

    order = [forward(k) for k in range(warmup)]
    for k in range(remaining):
        order += [forward(warmup + k), backward(k)]
    return order + [backward(k) for k in range(remaining, total)]


@pytest.fixture(scope="module")
def megatron_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Recorded]:
    """``megatron_run(chunks)``: steps 1-2 of a 3-step run; chunks=2 also evaluates after step 1."""
    runs: dict[int, Recorded] = {}

    def get(chunks: int) -> Recorded:
        if chunks not in runs:
            job = [sys.executable, "-m", "examples.megatron_job", "--ranks", str(RANKS)]
            job += ["--microbatches", str(MICROBATCHES), "--steps", "3", "--virtual-stages", str(chunks)]
            if chunks > 1:
                job += ["--eval-step", "1"]
            runs[chunks] = record(tmp_path_factory.mktemp(f"megatron-{chunks}"), job, timeout_s=300)
            assert runs[chunks].exit_code == 0, runs[chunks].stderr[-3000:]
        return runs[chunks]

    return get


def _manifest(run: Recorded) -> dict:
    return json.loads((run.out_dir / "run.json").read_text())


@pytest.mark.parametrize(
    ("chunks", "name", "stages", "left_out"),
    [(1, "1f1b", {"0": [0], "1": [1]}, 0), (2, "interleaved-1f1b", {"0": [0, 2], "1": [1, 3]}, 1)],
)
def test_manifest_names_the_schedule_and_its_stages(
    megatron_run: Callable[[int], Recorded], chunks: int, name: str, stages: dict, left_out: int
) -> None:
    manifest = _manifest(megatron_run(chunks))

    assert manifest["complete"] and manifest["world_size"] == RANKS
    assert (manifest["schedule"]["name"], manifest["pp_size"], manifest["virtual_stages"]) == (
        name,
        RANKS,
        chunks,
    )
    assert manifest["rank_to_stages"] == stages and manifest["microbatches"] == MICROBATCHES
    assert manifest["pipeline_groups"] == [list(range(RANKS))]  # megatron's pipeline-parallel group
    assert manifest["steps"]["captured"] == [1, 3]
    assert manifest["eval_steps"]["left_out"] == left_out and len(manifest["notes"]) == left_out


@pytest.mark.parametrize("chunks", [1, 2])
def test_realized_order_is_megatrons_schedule_table(
    megatron_run: Callable[[int], Recorded], chunks: int
) -> None:
    actions = realized_actions(load_run(megatron_run(chunks).out_dir, workers=1))

    assert sorted(actions["step"].unique().to_list()) == [0, 1]
    for (rank, step), rows in actions.group_by("rank", "step", maintain_order=True):
        realized = [f"{s}{k}{m}" for s, k, m in rows.select("stage", "kind", "microbatch").iter_rows()]
        assert realized == megatron_order(rank, chunks), f"rank {rank}, step {step}"


@pytest.mark.parametrize("chunks", [1, 2])
def test_each_stage_and_microbatch_runs_forward_and_backward_once(
    megatron_run: Callable[[int], Recorded], chunks: int
) -> None:
    actions = realized_actions(load_run(megatron_run(chunks).out_dir, workers=1))

    runs = actions.sort("start_ns").group_by("step", "stage", "microbatch").agg(pl.col("kind").str.join(""))

    expected = {(stage, mb) for stage in range(RANKS * chunks) for mb in range(MICROBATCHES)}
    for step in (0, 1):
        assert set(runs.filter(pl.col("step") == step).select("stage", "microbatch").iter_rows()) == expected
    assert set(runs["kind"].to_list()) == {"FB"}


def test_p2p_waits_are_labelled(megatron_run: Callable[[int], Recorded]) -> None:
    events = load_run(megatron_run(1).out_dir, workers=1).events

    names = set(events.filter(pl.col("name").str.starts_with("tracekit:comm:"))["name"])

    assert names == {"tracekit:comm:send", "tracekit:comm:recv", "tracekit:comm:sendrecv"}


def test_watching_megatron_costs_nothing_without_it(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['megatron'] = None\n"  # as if megatron-core were not installed
        "import collectors.hooks as hooks; hooks.install()\n"
        "try:\n"
        "    import megatron.core.pipeline_parallel.schedules\n"
        "except ImportError:\n"
        "    print('not installed')\n"
        "print(sorted(name for name in sys.modules if name.startswith(('megatron', 'collectors.patch'))))\n"
    )

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["not installed", "['megatron']"]


@pytest.mark.parametrize(
    ("forward", "backward", "label"),
    [
        (True, True, "tracekit:(3F1;1B0)OVERLAP_F_B"),
        (True, False, "tracekit:3F1"),
        (False, True, "tracekit:1B0"),
    ],
    ids=["pair", "forward-only-edge", "backward-only-edge"],
)
def test_combined_1f1b_call_is_labelled_by_its_arguments(
    tmp_path: Path, forward: bool, backward: bool, label: str
) -> None:
    """The overlapped F&B (MoE all-to-all hiding) needs CUDA; its labels follow the installed signature."""
    import inspect

    import torch
    from megatron.core.pipeline_parallel.combined_1f1b import combined_forward_backward_step

    from collectors import Capture
    from collectors.patch_megatron import _combined_span, _StepState

    state = _StepState(pp_rank=1, pp_size=2)
    b_output = object()
    state.forwards[id(b_output)] = (1, 0)  # forward_step ran stage 1 (chunk 0 of rank 1), micro-batch 0
    model = object()
    kwargs = {"f_model_chunk_id": 1, "current_microbatch": 1}
    args = (
        None,
        None,
        model if forward else None,
        4,
        None,
        [],
        model if backward else None,
        None,
        b_output,
        None,
        None,
    )
    signature = inspect.signature(combined_forward_backward_step)

    with Capture(tmp_path, steps="0:1", patch=False) as cap, cap.step():
        found = _combined_span(signature, state, args, kwargs)
        assert found is not None
        with found[0], torch.profiler.record_function("inside"):
            pass

    trace = json.loads(gzip.decompress((tmp_path / "rank0.json.gz").read_bytes()))
    assert label in {event["name"] for event in trace["traceEvents"]}
    assert found[1] == ((3, 1) if forward else None)
    assert (id(b_output) in state.forwards) == (not backward)
