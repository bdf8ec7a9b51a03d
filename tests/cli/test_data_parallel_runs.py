"""A real capture of 2 data-parallel replicas x 4 pipeline stages, analysed by every command.

One 8-rank 1F1B capture of the example job (``--dp 2``, gloo, through ``tracekit record``) with a
straggler planted on rank 4, the first stage of replica 1: a first stage has no pipeline peer, so
only the other replica's rank 0 can judge it. The straggler sleeps 30 ms per forward and backward
(about ten times an action's compute), so the results hold with both cores busy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from stragglers.straggler_runs import Job, record_all

from tracekit.cli.main import cli

pytestmark = pytest.mark.slow

GROUPS = [[0, 1, 2, 3], [4, 5, 6, 7]]
"""The pipelines ``--dp 2 --ranks 4`` builds: ranks d*4..d*4+3 are replica d."""
SLOW_RANK = 4


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The captured run directory."""
    job = Job("dp2-pp4", "1f1b", ranks=4, dp=2, microbatches=4, slow_rank=SLOW_RANK)
    return record_all(tmp_path_factory.mktemp("data-parallel"), [job], parallel=1)[job.name]


@pytest.fixture(scope="module")
def without_groups(dp_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same traces with a run.json written before pipeline groups were recorded."""
    copy = tmp_path_factory.mktemp("no-groups") / "run"
    shutil.copytree(dp_run, copy, ignore=shutil.ignore_patterns(".tracekit-cache"))
    manifest = json.loads((copy / "run.json").read_text())
    del manifest["pipeline_groups"]
    for rank in range(8):
        sidecar = copy / f"rank{rank}.meta.json"
        meta = json.loads(sidecar.read_text())
        del meta["schedule"]["pipeline_group"]
        sidecar.write_text(json.dumps(meta))
    (copy / "run.json").write_text(json.dumps(manifest))
    return copy


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--format", "json"])


def _json(*args: str) -> dict:
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_run_json_names_each_replicas_pipeline(dp_run: Path) -> None:
    manifest = json.loads((dp_run / "run.json").read_text())

    assert manifest["world_size"] == 8 and manifest["complete"] and manifest["problems"] == []
    assert manifest["pipeline_groups"] == GROUPS and manifest["pp_size"] == 4
    assert manifest["rank_to_stages"] == {str(rank): [rank % 4] for rank in range(8)}


def test_report_gives_every_rank_its_replica_and_each_replica_its_figures(dp_run: Path) -> None:
    payload = _json("report", str(dp_run))

    assert [(row["rank"], row["replica"]) for row in payload["ranks"]] == [(r, r // 4) for r in range(8)]
    assert payload["pipeline_groups"] == {"source": "run.json", "groups": GROUPS}
    slow, clean = (next(row for row in payload["replicas"] if row["replica"] == d) for d in (1, 0))
    assert slow["ranks"] == clean["ranks"] == 4
    # Replica 1 waits on its slow first stage; replica 0 idles in the step the slow replica stretches.
    assert slow["span_per_step"] > clean["span_per_step"]
    assert clean["bubble_fraction"] > slow["bubble_fraction"]


def test_the_planted_straggler_is_named_first_against_the_other_replica(dp_run: Path) -> None:
    payload = _json("stragglers", str(dp_run))

    first = payload["stragglers"][0]
    assert (first["rank"], first["replica"], first["reference"]) == (SLOW_RANK, 1, "peers")
    assert payload["unjudged"] == [] and payload["replicas"] == 2
    assert {row["reference"] for row in payload["ranks"]} == {"peers"}  # first and last stages too


def test_whatif_attributes_the_slowdown_to_the_slow_replica_stage_and_worker(dp_run: Path) -> None:
    payload = _json("whatif", str(dp_run))

    assert payload["replicas"] == 2 and set(payload["by_dp_rank"]) == {"0", "1"}
    assert (
        next(iter(payload["by_dp_rank"])) == "1" and payload["by_dp_rank"]["1"] > payload["by_dp_rank"]["0"]
    )
    assert next(iter(payload["by_stage"])) == "0" and next(iter(payload["by_rank"])) == str(SLOW_RANK)
    assert any(line.startswith("worst data-parallel replica (dp_rank): 1;") for line in payload["findings"])


def test_the_dashboard_builds(dp_run: Path, tmp_path: Path) -> None:
    page = tmp_path / "dp.html"

    result = _invoke("dashboard", str(dp_run), "--out", str(page))

    assert result.exit_code == 0, result.output
    assert page.stat().st_size > 0


def test_without_recorded_groups_the_error_names_the_layout_option(without_groups: Path) -> None:
    result = CliRunner().invoke(cli, ["stragglers", str(without_groups)])

    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        f"tracekit: error: {without_groups}: action 0F0 runs 2 times in step 0 (ranks 0, 4)"
    )
    assert "--pipelines contiguous:P or strided:P" in line


def test_the_layout_option_analyses_a_run_json_without_groups_as_the_recorded_groups_do(
    dp_run: Path, without_groups: Path
) -> None:
    recorded = _json("whatif", str(dp_run))

    given = _json("whatif", str(without_groups), "--pipelines", "contiguous:4")
    stragglers = _json("stragglers", str(without_groups), "--pipelines", "contiguous:4")

    assert given["by_dp_rank"] == recorded["by_dp_rank"] and given["slowdown"] == recorded["slowdown"]
    assert stragglers["stragglers"][0]["rank"] == SLOW_RANK


def test_a_layout_that_does_not_fit_the_run_is_refused_in_one_line(without_groups: Path) -> None:
    result = CliRunner().invoke(cli, ["whatif", str(without_groups), "--pipelines", "strided:4"])

    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    # The stage map in run.json shows the layout wrong before any action is read.
    assert "--pipelines strided:4: its replicas hold different stages" in line
