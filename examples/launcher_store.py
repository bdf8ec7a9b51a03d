"""The rendezvous of a job that spawns its own ranks: the launcher hosts their store, as torchrun's agent does.

Picking a free port, closing it and letting rank 0 bind it later races with every other process on
the machine: another job's gloo connection can take the port in between (``EADDRINUSE`` at
``init_process_group``, seen with captures running side by side). The launcher here binds the
store's port itself, keeps it bound while the ranks run, and tells them, through torch's
``TORCHELASTIC_USE_AGENT_STORE``, to connect to it as clients.

Used by the example jobs only; not part of the collector.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist

HOST = "127.0.0.1"


@contextmanager
def hosted_store() -> Iterator[int]:
    """Host a TCPStore on a port the kernel picks, set ``MASTER_ADDR``/``MASTER_PORT`` for the ranks; yields the port."""
    store = dist.TCPStore(HOST, 0, None, is_master=True, wait_for_workers=False)
    names = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(MASTER_ADDR=HOST, MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True")
    try:
        yield store.port
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        del store
