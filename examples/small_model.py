"""The example job's model size for the benchmarks' captures: small enough for this machine's cores.

With the job's default model (512 wide, 64 rows per micro-batch), four ranks' compute
oversubscribes two cores: a rank's actions then last as long as the scheduler leaves it a core
(wall-clock durations measure the sharing, not the rank), and a straggler that sleeps frees a core
for the others. At 128 wide and 16 rows a forward takes 0.3 to 0.6 ms and the four ranks' compute
fits on two cores, as each rank's would on its own accelerator. ``sample_traces/regenerate.sh``
records the samples at this size too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    """``examples.pipeline_job``'s ``--hidden`` and ``--microbatch-rows``."""

    hidden: int = 128
    microbatch_rows: int = 16

    def args(self) -> list[str]:
        """The example job's options for this size."""
        return ["--hidden", str(self.hidden), "--microbatch-rows", str(self.microbatch_rows)]
