"""Which global ranks form this rank's pipeline, read from the process group its stages talk over.

A data-parallel x pipeline job (P stages x D replicas) runs D copies of one pipeline side by side;
the analysis must know which ranks form each copy to resolve a forward's producer within it. Each
engine holds the process group its pipeline communicates over: ``PipelineStage.group`` in
torch.distributed.pipelining (None: the default group), ``DualPipe.group`` / ``DualPipeV.group``,
Megatron-core's pipeline-parallel group. Each patch's ``describe`` passes that group here, and
``group_ranks`` turns it into the global ranks in the group's rank order; the merge
(``collectors.merge``) puts them in pipeline-rank order and checks the ranks agree.

Not for ordering or checking groups (``collectors.merge``). torch and the standard library only;
never raises into the job: a group it cannot read is None (unknown), noted once in the sidecar.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from collectors.hooks import note_problem


def group_ranks(group: Any) -> tuple[int, ...] | None:
    """The global ranks of process group ``group`` (None: the default group) by group rank; None when unknown."""
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return tuple(int(rank) for rank in dist.get_process_group_ranks(group))
    except Exception as error:  # noqa: BLE001 - an unknown torch version or group type must not stop training
        note_problem(
            f"could not read the pipeline's process group ({error!r}); run.json names no pipeline groups"
        )
        return None
