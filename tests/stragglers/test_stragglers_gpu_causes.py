"""The GPU causes of a straggler: launch-bound, throttle and compute, on constructed GPU runs of real kernels.

Each run (``gpu_runs``) has rank 1 slow in one planted way; the analysis is the one the CLI runs
(``tracekit.run_analysis.analyse``, and ``tracekit stragglers --format json`` once). Throttle's
samples are written by the collector's own probes code (``collectors.probes.ProbeBuffer``) with
NVML replaced by a fake device: no GPU exists here, and NVML is the system boundary.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from stragglers.gpu_runs import CLOCK_MHZ, RANKS, THROTTLED_MHZ, real_kernels, write_gpu_run

from collectors import probes as collector_probes
from tracekit.cli.main import cli
from tracekit.run_analysis import analyse
from tracekit.trace.probes import read_probes

SLOW_RANK = 1


def _fake_nvml(clock_mhz: int, power_w: float, temperature_c: float, reasons: int) -> types.ModuleType:
    """A stand-in for ``pynvml`` reporting one GPU at the given clock, power and temperature."""
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_SM = 1
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: ("uuid", uuid)
    nvml.nvmlDeviceGetHandleByIndex = lambda index: ("index", index)
    nvml.nvmlDeviceGetClockInfo = lambda handle, clock: clock_mhz
    nvml.nvmlDeviceGetMaxClockInfo = lambda handle, clock: CLOCK_MHZ
    nvml.nvmlDeviceGetPowerUsage = lambda handle: int(power_w * 1000)
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda handle: 700_000
    nvml.nvmlDeviceGetTemperature = lambda handle, sensor: temperature_c
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: reasons
    return nvml


def _write_probes(root: Path, rank: int, nvml: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rank's probes file as the collector writes it: a few probed actions and step ends, NVML sampled."""
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(collector_probes, "_cuda_device", lambda: (0, "GPU-fake"))
    buffer = collector_probes.ProbeBuffer()
    try:
        for step in range(3):
            for microbatch in range(2):
                with buffer.span(step, rank, "F", microbatch):
                    sum(range(1000))
            buffer.step_ended(step)
    finally:
        buffer.close()
    buffer.write(root, rank)


@pytest.fixture(scope="module")
def kernels(shared: Path) -> list[tuple[str, int]]:
    return real_kernels(shared / "traces" / "deepseek-v3-dualpipe-chunk" / "train.json.gz")


@pytest.fixture(scope="module")
def runs(kernels, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One run per planted way, rank 1 slow."""
    return {
        how: write_gpu_run(tmp_path_factory.mktemp(how), kernels, SLOW_RANK, how)
        for how in ("launch", "kernels")
    }


@pytest.fixture(scope="module")
def throttled_run(kernels, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rank 1's kernels longer by the clock ratio, and every rank's probes file with its NVML samples."""
    root = write_gpu_run(tmp_path_factory.mktemp("clock"), kernels, SLOW_RANK, "clock")
    with pytest.MonkeyPatch.context() as monkeypatch:
        for rank in range(RANKS):
            throttled = rank == SLOW_RANK
            nvml = _fake_nvml(
                THROTTLED_MHZ if throttled else CLOCK_MHZ,
                power_w=698.0 if throttled else 540.0,
                temperature_c=88.0 if throttled else 61.0,
                reasons=0x4 if throttled else 0x0,
            )
            _write_probes(root, rank, nvml, monkeypatch)
    return root


def _rank_causes(root: Path, rank: int) -> pl.DataFrame:
    return analyse(root).causes.filter(pl.col("rank") == rank).sort("order")


def test_a_rank_whose_gpu_waits_for_its_launches_is_launch_bound(runs) -> None:
    analysis = analyse(runs["launch"])

    causes = analysis.causes.sort("order")
    mine = causes.filter(pl.col("rank") == SLOW_RANK).to_dicts()

    assert analysis.stragglers.flagged["rank"].to_list() == [SLOW_RANK]
    assert mine[0]["cause"] == "launch-bound" and mine[0]["share"] > 0.9
    assert "its CPU was still launching for 100%" in mine[0]["evidence"]
    assert set(causes.filter(pl.col("cause") == "waits")["upstream"].to_list()) == {f"rank {SLOW_RANK}"}


def test_slower_kernels_are_compute_not_launch_bound(runs) -> None:
    mine = _rank_causes(runs["kernels"], SLOW_RANK)

    assert mine["cause"].to_list() == ["compute"]
    assert "GPU busy time" in mine["evidence"][0]


def test_the_launch_wait_of_healthy_ranks_is_nil(runs) -> None:
    from tracekit.stragglers.launch import launch_figures, rank_launch

    analysis = analyse(runs["launch"])
    figures = rank_launch(launch_figures(analysis.gpu.action_projection)).sort("rank")
    wait_share = dict(zip(figures["rank"], figures["launch_wait_ms"] / figures["wall_ms"]))

    assert wait_share[SLOW_RANK] > 0.6  # two thirds of its span: kernels run at a third of it
    assert all(share < 0.01 for rank, share in wait_share.items() if rank != SLOW_RANK)


def test_a_rank_at_a_lower_clock_than_its_peers_is_throttle_first(throttled_run: Path) -> None:
    mine = _rank_causes(throttled_run, SLOW_RANK).to_dicts()

    assert mine[0]["cause"] == "throttle" and mine[0]["share"] > 0.9
    assert (
        f"SM clock {THROTTLED_MHZ} MHz" in mine[0]["evidence"] and f"{CLOCK_MHZ} MHz" in mine[0]["evidence"]
    )
    assert "software power cap" in mine[0]["evidence"] and "698 W" in mine[0]["evidence"]


def test_the_collector_samples_nvml_at_action_and_step_ends(throttled_run: Path) -> None:
    probes = read_probes(throttled_run, tuple(range(RANKS)))

    assert probes is not None
    samples = probes.nvml.filter(pl.col("rank") == SLOW_RANK)
    # The first action's end takes one (then one per 100 ms at most), and each of the 3 step ends one.
    assert samples.height == 4
    assert samples["sm_clock_mhz"].unique().to_list() == [THROTTLED_MHZ]
    assert samples["power_limit_w"].unique().to_list() == [700.0]
    assert samples["clock_reasons"].unique().to_list() == [0x4]


def test_the_cli_json_names_the_cause_and_what_it_could_not_compute(runs) -> None:
    result = CliRunner().invoke(cli, ["stragglers", str(runs["launch"]), "--format", "json"])

    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    first = next(row for row in payload["causes"] if row["rank"] == SLOW_RANK and row["order"] == 1)
    assert first["cause"] == "launch-bound" and first["own_ms"] > first["reference_ms"]
    assert [note.split(":")[0] for note in payload["absent_causes"]] == ["throttle"]


def test_a_cpu_run_says_the_gpu_causes_are_absent(shared: Path) -> None:
    analysis = analyse(Path(__file__).parents[2] / "sample_traces" / "dualpipev-straggler")

    notes = analysis.absent_causes

    assert [note.split(":")[0] for note in notes] == ["launch-bound", "throttle"]
    assert all("CPU-timed run" in note for note in notes)
    assert not analysis.causes["cause"].is_in(["launch-bound", "throttle"]).any()
