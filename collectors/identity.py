"""Who this rank is: its rank, its world size and the run id its job's ranks share.

Not for the capture itself (``collectors.capture``). Imports torch.distributed and the standard
library only; never waits on another rank.
"""

from __future__ import annotations

import os
import uuid

import torch.distributed as dist

RUN_ID_STORE_KEY = "tracekit/run_id"
"""Key of the run id in the process group's store (``shared_run_id``)."""


def shared_run_id() -> str:
    """A run id every rank of this job agrees on, without any rank waiting for another.

    The first rank to ask sets it in the process group's store (an atomic compare-and-set); the
    others read it back. Without a process group, the id is this process's own.
    """
    mine = uuid.uuid4().hex
    if not (dist.is_available() and dist.is_initialized()):
        return mine
    try:
        agreed = dist.distributed_c10d._get_default_store().compare_set(RUN_ID_STORE_KEY, "", mine)
    except Exception:  # noqa: BLE001 - a store without compare_set: each rank keeps its own id
        return mine
    return agreed.decode() if isinstance(agreed, bytes) else str(agreed)


def int_env(name: str) -> int | None:
    """The integer environment variable ``name``, or None when unset or not a number."""
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def rank_and_world_size() -> tuple[int, int]:
    """This process's rank and world size: its process group's, else RANK / WORLD_SIZE, else 0 and 1."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int_env("RANK") or 0, int_env("WORLD_SIZE") or 1
