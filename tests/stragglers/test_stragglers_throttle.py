"""A GPU clock against its peers' from NVML sample rows: the pure computation behind ``throttle``."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.stragglers.throttle import THROTTLE_RATIO, clock_deficit, reason_names
from tracekit.trace.probes import NVML_SCHEMA


def _samples(clocks: dict[int, list[float]], reasons: dict[int, int] | None = None) -> pl.DataFrame:
    """Per rank, one sample per clock: 1980 MHz peak, 500 W (600 when below peak), 60 C (85)."""
    rows = [
        (rank, step, clock, 1980.0, 500.0 if clock >= 1900 else 600.0, 60.0 if clock >= 1900 else 85.0, 700.0,
         (reasons or {}).get(rank))
        for rank, values in clocks.items()
        for step, clock in enumerate(values)
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=NVML_SCHEMA, orient="row")


def test_a_rank_below_its_peers_clock_is_throttled() -> None:
    nvml = _samples({0: [1980, 1980], 1: [1400, 1410, 1980], 2: [1975, 1980], 3: [1980]}, {1: 0x4 | 0x1})

    deficit = clock_deficit(nvml, 1)

    assert deficit is not None
    assert (deficit.sm_clock_mhz, deficit.peer_sm_clock_mhz, deficit.samples) == (1410.0, 1980.0, 3)
    assert deficit.slowdown == pytest.approx(1980 / 1410 - 1)
    assert deficit.reasons == ("software power cap",)  # GPU idle left out
    assert "600 W against 500 W" in deficit.evidence() and "85 C against 60 C" in deficit.evidence()


@pytest.mark.parametrize(
    "clocks",
    [
        {0: [1980], 1: [1980 * THROTTLE_RATIO + 1], 2: [1980]},  # within the ratio
        {1: [1200]},  # no peer has samples
        {0: [1980], 2: [1980]},  # the rank itself has none
    ],
)
def test_no_deficit_without_a_clock_below_the_ratio_of_peers(clocks: dict[int, list[float]]) -> None:
    assert clock_deficit(_samples(clocks), 1) is None


def test_reason_bits_are_named() -> None:
    assert reason_names(0x8 | 0x40) == ("hardware slowdown", "hardware thermal slowdown")
