"""The live mode's wire format: what ranks and the aggregator say to each other (docs/live.md).

Transport: UDP datagrams, one JSON object each. A rank sends to the aggregator's address
(``TRACEKIT_LIVE_ADDRESS=HOST:PORT``, set by ``tracekit record --live``) and reads replies on the
same socket. UDP because a rank must never block on the aggregator: a datagram that cannot be sent
at once (full buffer, no listener, unreachable host) is dropped and counted, never retried.

Rank → aggregator:

- ``{"t": "step", "v": 1, "r": rank, "w": world_size, "h": host, "p": pid, "s": step,
  "t0": step start (ns, perf_counter on the rank's host), "d": step duration (ns), "c": ns waiting
  on p2p communication, "clk": "cpu" | "cuda", "cap": 1 while the step is profiled, "x": summaries
  dropped so far, "a": [[stage, kind, microbatch, start offset ns, end offset ns, overlapped 0|1],
  ...], "sw": [[stage, params, embedding_params, layers], ...] (the stage work of collectors.work),
  "pg": [global ranks of the rank's pipeline process group, by group rank] (collectors.groups;
  absent when unknown), "sc": the schedule's class, as run.json's ``schedule.class`` (absent when
  unknown)}``: one per training step; offsets count from ``t0``;
- ``{"t": "bye", "v": 1, "r": rank, "s": steps run, "x": dropped}``: the rank's process exits.

Aggregator → rank: ``{"t": "ack"}`` (someone listens) and ``{"t": "capture", "first_step": s,
"steps": n, "dir": "capture-step000120"}`` (profile steps s..s+n-1 into that directory, beside
live.jsonl).

Standard library only: the collectors import it inside the job, the aggregator outside.
"""

from __future__ import annotations

import json
from typing import Any

ADDRESS_ENV = "TRACEKIT_LIVE_ADDRESS"
"""``HOST:PORT`` of the aggregator; a rank in whose environment it is set runs in live mode."""

VERSION = 1
MAX_DATAGRAM = 65_000
"""Largest summary a rank sends (UDP's limit is 65,507 bytes); a larger one is dropped and counted."""


def parse_address(text: str, any_port: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) to (host, port); ``any_port`` allows port 0; ValueError naming the fault."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not (0 if any_port else 1) <= int(port) < 65536:
        raise ValueError(f"bad live address {text!r}: expected HOST:PORT, e.g. 10.0.0.5:9555")
    return host, int(port)


def encode(message: dict[str, Any]) -> bytes:
    """One message as compact JSON bytes."""
    return json.dumps(message, separators=(",", ":")).encode()


def decode(data: bytes) -> dict[str, Any] | None:
    """A received datagram as a message, or None when it is not one of ours."""
    try:
        message = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return message if isinstance(message, dict) and isinstance(message.get("t"), str) else None
