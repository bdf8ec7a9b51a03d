"""``tracekit record --live``: start the aggregator, run the job with live timers, stop, merge captures.

Two ways to run:

- this host's aggregator (the default): bind a UDP socket (``--live-listen``, default
  ``127.0.0.1`` on a free port: local ranks only; ``0.0.0.0:PORT`` lets ranks on other hosts reach
  it), hand it to ``python -m tracekit.live.aggregator`` and tell the ranks where it is
  (``TRACEKIT_LIVE_ADDRESS``). The socket is bound before the job starts, so no summary is lost
  to a race;
- an aggregator elsewhere (``--live-address HOST:PORT``, e.g. on the nodes of a multi-host job
  other than the first): start none; the ranks send there.

The job's exit status is returned unchanged whatever happens to the aggregator. After the job,
the aggregator gets SIGTERM (it judges what is left and writes its ``end`` record), then each
capture directory it asked for gets its run.json with the job's exit status.

Not for: parsing arguments (``tracekit.cli.record``) or judging (``tracekit.live.aggregator``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors import live_wire
from collectors.launch import record
from collectors.merge import write_manifest
from tracekit.errors import TracekitError
from tracekit.live.aggregator import LOG_NAME
from tracekit.live.assess import LiveConfig

AGGREGATOR_FAILED_EXIT = 5
"""``tracekit record --live``'s exit status when the job succeeded but the live aggregator failed."""
STOP_TIMEOUT_S = 30.0
"""How long the aggregator may take to judge the last interval after the job has exited."""


@dataclass(frozen=True)
class LiveOptions:
    """How ``tracekit record --live`` runs its aggregator."""

    config: LiveConfig = field(default_factory=LiveConfig)
    """What the aggregator judges and when it captures."""
    listen: str = "127.0.0.1:0"
    """HOST:PORT the aggregator binds (port 0: any free port)."""
    join: str | None = None
    """HOST:PORT of an aggregator started elsewhere; None starts one here."""
    prometheus_port: int | None = None
    """Serve the Prometheus gauges on this port; None: no endpoint."""
    view: bool = True
    """Print the live terminal view."""

    def __post_init__(self) -> None:
        live_wire.parse_address(self.listen, any_port=True)
        if self.join is not None:
            live_wire.parse_address(self.join)
        if self.prometheus_port is not None and not 0 < self.prometheus_port < 65536:
            raise ValueError(f"bad Prometheus port {self.prometheus_port}")


@dataclass(frozen=True)
class LiveOutcome:
    """What a live session did."""

    exit_code: int
    log: Path | None
    """live.jsonl (None when the aggregator ran elsewhere)."""
    records: tuple[dict[str, Any], ...]
    """live.jsonl's records (empty when the aggregator ran elsewhere)."""
    captures: tuple[dict[str, Any], ...]
    """run.json of each capture on anomaly."""
    problems: tuple[str, ...]


def _bind(listen: str) -> tuple[socket.socket, str]:
    """The aggregator's socket and the address ranks on this host send to."""
    host, port = live_wire.parse_address(listen, any_port=True)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise TracekitError(
            f"cannot listen for live summaries on {listen}: {error.strerror or error}"
        ) from None
    bound_host, bound_port = sock.getsockname()[:2]
    local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(bound_host, bound_host)
    return sock, f"[{local}]:{bound_port}" if ":" in local else f"{local}:{bound_port}"


def _check_port(port: int) -> None:
    """TracekitError, before anything runs, when the Prometheus endpoint's port cannot be bound."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As the endpoint's server binds it: SO_REUSEADDR, so a port left in TIME_WAIT is no fault.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("0.0.0.0", port))
        probe.listen(1)
    except OSError as error:
        raise TracekitError(
            f"cannot serve the Prometheus metrics on port {port}: {(error.strerror or str(error)).lower()} "
            "(choose another --prometheus-port); nothing was run"
        ) from None
    finally:
        probe.close()


def _aggregator_command(sock: socket.socket, out_dir: Path, run_id: str, options: LiveOptions) -> list[str]:
    config = options.config
    command = [
        sys.executable, "-m", "tracekit.live.aggregator",
        "--fd", str(sock.fileno()),
        "--out", str(out_dir),
        "--run-id", run_id,
        "--interval", str(config.interval_steps),
        "--persist", str(config.persist_intervals),
        "--capture-steps", str(config.capture_steps),
        "--capture-period", str(config.capture_period_s),
        "--threshold", str(config.stragglers.threshold),
        "--view", "on" if options.view else "off",
        "--parent-pid", str(os.getpid()),
    ]  # fmt: skip
    if options.prometheus_port is not None:
        command += ["--prometheus-port", str(options.prometheus_port)]
    return command


def _stop(aggregator: subprocess.Popen[bytes], problems: list[str]) -> bool:
    """Stop the aggregator once the job is done; False when it had failed by itself."""
    code = aggregator.poll()
    if code is not None:
        if code:
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            problems.append(
                f"the live aggregator exited early ({how}): the job ran on without live judging, and "
                "no alert or capture on anomaly came from it after that"
            )
        return not code
    aggregator.terminate()
    try:
        aggregator.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        aggregator.kill()
        aggregator.wait()
        problems.append(f"the live aggregator did not finish within {STOP_TIMEOUT_S:.0f} s and was killed")
    return True


def read_log(path: Path) -> tuple[dict[str, Any], ...]:
    """live.jsonl's records; a torn last line (the aggregator killed mid-write) is left out."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return tuple(records)


CAPTURE_GLOB = "capture-step*"
"""Directories of the captures on anomaly, beside live.jsonl."""


def _merge_captures(
    out_dir: Path,
    names: Sequence[str],
    run_id: str,
    command: Sequence[str],
    exit_code: int,
    problems: list[str],
) -> tuple[dict[str, Any], ...]:
    """Write run.json of each capture directory with the job's exit status; their payloads."""
    captures = []
    for name in names:
        directory = out_dir / name
        if not directory.is_dir():
            problems.append(
                f"a capture into {name} was asked for, but no rank reached its steps before the job ended"
            )
            continue
        try:
            manifest = write_manifest(directory, run_id=run_id, command=command, exit_code=exit_code)
        except OSError as error:
            problems.append(f"cannot write {directory / 'run.json'}: {error}")
            continue
        captures.append(manifest.to_json())
    return tuple(captures)


def record_live(
    command: Sequence[str], out_dir: Path, steps: str | None, options: LiveOptions
) -> LiveOutcome:
    """Run ``command`` in live mode, writing ``out_dir/live.jsonl`` and captures on anomaly beside it."""
    out_dir = Path(out_dir).resolve()
    log = out_dir / LOG_NAME
    if log.exists() or any(out_dir.glob(CAPTURE_GLOB)):
        raise TracekitError(
            f"{out_dir} holds an earlier live session; choose another --out (nothing was run)"
        )
    run_id = uuid.uuid4().hex
    problems: list[str] = []
    if options.join is not None:
        outcome = record(
            command, out_dir, steps, extra_env={live_wire.ADDRESS_ENV: options.join}, run_id=run_id
        )
        # The aggregator elsewhere may have asked this host's ranks for captures: merge them here.
        asked = sorted(path.name for path in out_dir.glob(CAPTURE_GLOB) if path.is_dir())
        captures = _merge_captures(out_dir, asked, run_id, command, outcome.exit_code, problems)
        return LiveOutcome(outcome.exit_code, None, (), captures, tuple(problems))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TracekitError(f"cannot create {out_dir}: {error.strerror or error}") from None
    if options.prometheus_port is not None:
        _check_port(options.prometheus_port)
    sock, address = _bind(options.listen)
    try:
        aggregator = subprocess.Popen(
            _aggregator_command(sock, out_dir, run_id, options), pass_fds=(sock.fileno(),)
        )
    finally:
        sock.close()  # the aggregator holds its own copy
    healthy = False
    try:
        outcome = record(command, out_dir, steps, extra_env={live_wire.ADDRESS_ENV: address}, run_id=run_id)
    finally:
        healthy = _stop(aggregator, problems)
    records = read_log(log) if log.exists() else ()
    asked = [r["dir"] for r in records if r.get("type") == "capture" and isinstance(r.get("dir"), str)]
    captures = _merge_captures(out_dir, asked, run_id, command, outcome.exit_code, problems)
    # A job that succeeded under a failed aggregator did not get what was asked: say so in the status.
    exit_code = AGGREGATOR_FAILED_EXIT if outcome.exit_code == 0 and not healthy else outcome.exit_code
    return LiveOutcome(exit_code, log, records, captures, tuple(problems))
