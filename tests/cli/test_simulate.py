"""``tracekit simulate`` and ``tracekit sweep`` end to end, through click."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from tracekit.cli.main import cli
from tracekit.schedule.engine import simulate
from tracekit.schedule.registry import generate
from tracekit.schedule.sweep import ShareCosts, share_costs


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_simulate_json_has_the_documented_shape() -> None:
    code, out, _ = _run(
        "simulate", "--schedule", "dualpipev", "--pp", "4", "--microbatches", "8", "--format", "json"
    )

    payload = orjson.loads(out)

    assert code == 0
    assert set(payload) == {"makespan", "bubble_rate", "param_copies", "ranks", "schedule"}
    assert set(payload["ranks"][0]) == {"rank", "busy", "idle", "bubble_fraction", "peak_activations"}
    assert set(payload["schedule"][0]) == {"rank", "stage", "kind", "microbatch", "start", "end"}
    assert len(payload["schedule"]) == 8 * 8 * 2 + sum(row["kind"] == "W" for row in payload["schedule"])
    assert all(rank["idle"] == pytest.approx(payload["makespan"] - rank["busy"]) for rank in payload["ranks"])


def test_simulate_cost_flags_follow_the_zero_bubble_paper() -> None:
    # 1F1B idles (P-1)(F+B+W) with B the backward for inputs: 3 x (1 + 2 + 0.5).
    code, out, _ = _run(
        "simulate",
        "--schedule",
        "1f1b",
        "--pp",
        "4",
        "--microbatches",
        "8",
        "--f",
        "1",
        "--b",
        "2",
        "--w",
        "0.5",
        "--format",
        "json",
    )

    payload = orjson.loads(out)

    assert code == 0
    assert [rank["idle"] for rank in payload["ranks"]] == pytest.approx([10.5] * 4)
    assert payload["param_copies"] == 1


def test_simulate_fb_defaults_to_f_plus_b_plus_w() -> None:
    base = ("simulate", "--schedule", "dualpipe", "--pp", "4", "--microbatches", "8", "--format", "json")

    _, default, _ = _run(*base)
    _, explicit, _ = _run(*base, "--fb", "3")

    assert orjson.loads(default)["makespan"] == orjson.loads(explicit)["makespan"]


def test_simulate_table_labels_every_bubble_figure() -> None:
    code, out, _ = _run("simulate", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--explain")

    flat = " ".join(out.split())
    assert code == 0
    assert "bubble_fraction = idle / makespan" in flat
    assert "bubble_rate (Zero Bubble paper, sec. 5.3)" in flat
    assert "idle = makespan - busy" in flat


def test_simulate_bad_sizes_are_one_line_errors() -> None:
    code, _, err = _run("simulate", "--schedule", "dualpipe", "--pp", "3", "--microbatches", "8")

    assert code == 2
    assert err.strip().splitlines() == ["tracekit: error: dualpipe: the pipeline ranks (pp) must be even, got 3"]


def test_sweep_compares_with_the_baseline_and_prices_it() -> None:
    code, out, _ = _run(
        "sweep",
        "--schedules",
        "1f1b,dualpipe",
        "--pp",
        "8",
        "--microbatches",
        "16",
        "--step-time",
        "6.9",
        "--tokens-per-step",
        "2000000",
        "--format",
        "json",
    )

    rows = {row["schedule"]: row for row in orjson.loads(out)["rows"]}

    assert code == 0
    assert rows["dualpipe"]["speedup_vs_baseline"] == pytest.approx(69 / 54)
    assert rows["dualpipe"]["gpu_hours_recovered_per_mtok"] == pytest.approx(8 * 1.5 / 3600 / 2)


def test_sweep_warns_about_skipped_combinations() -> None:
    code, _, err = _run("sweep", "--schedules", "1f1b,dualpipe", "--pp", "4,8", "--microbatches", "8")

    assert code == 0
    assert "skipped dualpipe pp=8" in err


def _timeline_rows_one_by_one(timeline) -> list[dict]:
    """Each action of a simulated timeline as a row, walked step by step."""
    rows = []
    for rank, steps in enumerate(timeline.schedule.steps):
        for index, step in enumerate(steps):
            node = timeline.offsets[rank] + index
            halves = getattr(step, "halves", (step,))
            for action in halves:
                rows.append(
                    {
                        "rank": rank,
                        "stage": action.stage,
                        "kind": action.kind.value,
                        "microbatch": action.microbatch,
                        "start": timeline.start[node],
                        "end": timeline.end[node],
                        "overlapped": len(halves) == 2,
                    }
                )
    return rows


@pytest.mark.parametrize("name", ["1f1b", "zb-h2", "interleaved-1f1b", "dualpipe", "dualpipev"])
def test_simulate_json_lists_every_action_of_the_timeline_in_order(name: str) -> None:
    schedule = generate(name, 4, 8)
    timeline = simulate(schedule, share_costs(schedule, ShareCosts(1.0, 1.0, 1.0, None, 0.0)))
    code, out, _ = _run(
        "simulate", "--schedule", name, "--pp", "4", "--microbatches", "8", "--format", "json"
    )

    expected = _timeline_rows_one_by_one(timeline)
    assert code == 0
    assert timeline.to_frame().to_dicts() == expected
    assert orjson.loads(out)["schedule"] == [
        {k: v for k, v in row.items() if k != "overlapped"} for row in expected
    ]


def test_simulate_refuses_a_schedule_beyond_its_memory_bound_in_one_line() -> None:
    code, _, err = _run("simulate", "--schedule", "1f1b", "--pp", "1024", "--microbatches", "512")

    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(
        "tracekit: error: pp 1024 x 1 stage(s) per rank x 512 micro-batches is 1,572,864 actions"
    )
    assert "GiB" in line
