"""Whether a rank's GPU ran at a lower clock than its peers': the evidence of ``throttle``.

The collector samples each rank's GPU through NVML (``collectors.probes``: SM clock, its maximum,
power, power limit, temperature and the clock-event reasons, at action and step boundaries while
the window is open); ``tracekit.trace.probes`` reads them as ``NVML_SCHEMA`` rows. A rank is
throttled when the median of its SM-clock samples is below ``THROTTLE_RATIO`` of the median of the
other ranks' medians. Power and temperature are read beside it, as evidence of why (a power cap
or heat); the reasons NVML gives for a lowered clock are named from ``CLOCK_REASONS``.

Not for: reading the samples (``tracekit.trace.probes``) or pricing the cause (``causes``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import polars as pl

THROTTLE_RATIO = 0.95
"""An SM clock below this share of the other ranks' median is ``throttle``."""

CLOCK_REASONS: dict[int, str] = {
    0x1: "GPU idle",
    0x2: "applications clock setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}
"""NVML's clock-event (throttle) reason bits (``nvmlClocksEventReason*`` in nvml.h) and their names."""

_IDLE = 0x1


@dataclass(frozen=True)
class ClockDeficit:
    """A rank's GPU clock against its peers', with power and temperature beside it."""

    rank: int
    samples: int
    sm_clock_mhz: float
    """Median of the rank's SM-clock samples."""
    peer_sm_clock_mhz: float
    """Median of the other ranks' medians."""
    power_w: float
    peer_power_w: float
    temperature_c: float
    peer_temperature_c: float
    reasons: tuple[str, ...]
    """``CLOCK_REASONS`` seen in the rank's samples (GPU idle left out); empty where NVML gave none."""

    @property
    def slowdown(self) -> float:
        """How much longer the same kernels take at this clock: peer clock / own clock - 1."""
        return self.peer_sm_clock_mhz / self.sm_clock_mhz - 1

    def evidence(self) -> str:
        """The numbers in one sentence."""
        why = f"; NVML's reasons: {', '.join(self.reasons)}" if self.reasons else ""
        return (
            f"SM clock {self.sm_clock_mhz:.0f} MHz (median of {self.samples} samples) against "
            f"{self.peer_sm_clock_mhz:.0f} MHz on the other ranks; power {self.power_w:.0f} W against "
            f"{self.peer_power_w:.0f} W, {self.temperature_c:.0f} C against {self.peer_temperature_c:.0f} C{why}"
        )


def reason_names(mask: int) -> tuple[str, ...]:
    """The ``CLOCK_REASONS`` set in ``mask``, GPU idle left out (a step-end sample may find it idle)."""
    return tuple(name for bit, name in CLOCK_REASONS.items() if mask & bit and bit != _IDLE)


def clock_deficit(nvml: pl.DataFrame, rank: int) -> ClockDeficit | None:
    """``rank``'s clock against its peers' (``NVML_SCHEMA`` rows); None unless it is below ``THROTTLE_RATIO``
    of theirs (or the rank, or every other rank, has no sample)."""
    medians = nvml.group_by("rank").agg(
        pl.len().alias("samples"),
        *(pl.col(name).median() for name in ("sm_clock_mhz", "power_w", "temperature_c")),
        pl.col("clock_reasons").fill_null(0).cast(pl.Int64()).bitwise_or().alias("reasons"),
    )
    mine = medians.filter(pl.col("rank") == rank).to_dicts()
    peers = medians.filter(pl.col("rank") != rank)
    if not mine or peers.is_empty() or not mine[0]["sm_clock_mhz"]:
        return None
    peer = {
        name: statistics.median(peers[name].to_list())
        for name in ("sm_clock_mhz", "power_w", "temperature_c")
    }
    own = mine[0]
    if own["sm_clock_mhz"] >= THROTTLE_RATIO * peer["sm_clock_mhz"]:
        return None
    return ClockDeficit(
        rank=rank,
        samples=int(own["samples"]),
        sm_clock_mhz=float(own["sm_clock_mhz"]),
        peer_sm_clock_mhz=float(peer["sm_clock_mhz"]),
        power_w=float(own["power_w"]),
        peer_power_w=float(peer["power_w"]),
        temperature_c=float(own["temperature_c"]),
        peer_temperature_c=float(peer["temperature_c"]),
        reasons=reason_names(int(own["reasons"] or 0)),
    )
