"""Where a rank's time went inside each labelled action: on-CPU, run-queue wait, GC pauses, GPU clocks.

While a capture window is open, every compute action span (``collectors.spans.action_span`` and
``pair_span``) also reads, at entry and exit, four clocks of the thread that runs it:

- wall time (``time.monotonic_ns``);
- on-CPU time of the thread (``time.thread_time_ns``);
- run-queue wait of the thread: ready but not running, and how many times it was put on a core
  (the second and third fields of Linux's ``/proc/thread-self/schedstat``, read through one
  descriptor per thread; absent elsewhere);
- the thread's context switches, voluntary (it slept) and involuntary (it was preempted)
  (``getrusage(RUSAGE_THREAD)``, Linux; -1 elsewhere): an action with no voluntary switch never
  slept, so all its time off a core was a wait for one;
- Python garbage-collection pauses (``gc.callbacks`` start/stop, summed process-wide while the
  window is open).

and keeps the differences, one row per action, in memory. The wall clock is read first on entry
and last on exit, and the exit reads the CPU clock before schedstat (``READ_ORDER``): a wait for a
core served as one of the probe's own reads returns counts in both. The
window's whole run-queue wait and dispatches of the thread that opened it, and its wall time, go
in the header: the host's wait per dispatch, which every action of the rank, inside or outside a
label, sees alike, and its share of the window. They are taken as the window closes
(``close_window``), before the trace is exported:
the export's own waits are not the job's. Where a GPU is present and
``nvidia-ml-py`` is installed, the device's SM clock (and its maximum), power (and its enforced
limit), temperature and clock-event reasons are sampled through NVML at action ends, at most once
per ``NVML_INTERVAL_NS``, and at every captured step's end (the header's ``nvml``); without a GPU,
or where NVML does not start, a note in the header says why and nothing is sampled. The window's rows are written once, beside the trace, as
``rank{r}.probes.jsonl.gz`` (``PROBES_FORMAT``, documented in docs/capture.md: a header line, then
one JSON array per action; not ``.json.gz``, so no trace reader takes it for a trace). Outside a window
nothing here runs: the spans test one flag.

Not for: judging the numbers (``tracekit.stragglers.causes``) or opening the window
(``collectors.capture``). Imports the standard library only (torch, for CUDA's presence, lazily);
never raises into the job.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

try:
    import resource
except ImportError:  # not on Windows: no per-thread switch counts
    resource = None  # type: ignore[assignment]

PROBES_FORMAT = "tracekit-probes/1"
"""The ``format`` field of a probes file; readers refuse others."""

COLUMNS = (
    "step", "stage", "kind", "microbatch", "depth", "wall_ns", "cpu_ns", "runq_ns", "dispatches", "gc_ns",
    "peer_runq_ns", "voluntary", "involuntary",
)  # fmt: skip
"""One row per labelled compute action, in this order (``rows`` in the file)."""

_SCHEDSTAT = "/proc/thread-self/schedstat"


def probes_name(rank: int) -> str:
    """File name of rank ``rank``'s probes, beside its trace."""
    return f"rank{rank}.probes.jsonl.gz"


class _GcClock:
    """Sums Python's GC pauses while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.total_ns = 0
        self.pauses = 0
        self._started = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.monotonic_ns()
        elif self._started:
            self.total_ns += time.monotonic_ns() - self._started
            self.pauses += 1
            self._started = 0


NVML_INTERVAL_NS = 100_000_000
"""At most one NVML sample per this many ns at action ends (every step's end takes one too): a
sample is six NVML queries, tens of µs, so this keeps it under 0.1% of the window."""

MAX_NVML_SAMPLES = 20_000
"""Samples kept per window at most (about 2 MB in the header); later ones are counted, not kept."""


def _cuda_device() -> tuple[int, str | None]:
    """This process's CUDA device: its index and NVML UUID (``GPU-...``, None where torch lacks it).

    RuntimeError with the reason when torch sees no GPU.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no GPU: no clock, power or temperature samples")
    device = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return device, None if uuid is None else f"GPU-{uuid}"


class _Nvml:
    """SM clock, power and temperature of this process's GPU, when one is present and NVML loads.

    The device is found by its UUID (torch's device index counts only the visible GPUs, NVML's all
    of them), else by index. Any fault leaves a note and stops sampling; none reaches the job.
    """

    def __init__(self) -> None:
        self.handle: Any = None
        self.module: Any = None
        self.note: str | None = None
        self.dropped = 0
        try:
            device, uuid = _cuda_device()
        except RuntimeError as error:
            self.note = str(error)
            return
        except Exception as error:  # noqa: BLE001 - a probe never stops training
            self.note = f"no GPU: {error!r}"
            return
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            self.note = "nvidia-ml-py is not installed: no clock, power or temperature samples"
            return
        try:
            pynvml.nvmlInit()
        except Exception as error:  # noqa: BLE001
            self.note = f"NVML did not start: {error!r}: no clock, power or temperature samples"
            return
        try:
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else None
        except Exception:  # noqa: BLE001 - fall back to the index below
            self.handle = None
        try:
            if self.handle is None:
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(device)
            self.module = pynvml
        except Exception as error:  # noqa: BLE001
            self.note = f"NVML found no device {device}: {error!r}"

    def stop(self) -> None:
        """Stop sampling and release NVML (idempotent)."""
        module, self.module, self.handle = self.module, None, None
        if module is not None:
            with contextlib.suppress(Exception):  # a probe never stops training
                module.nvmlShutdown()

    def _optional(self, read: Any) -> Any:
        """A field some drivers do not give (power limit, clock reasons): None when NVML refuses it."""
        try:
            return read()
        except Exception:  # noqa: BLE001
            return None

    def sample(self, step: int) -> dict[str, Any] | None:
        """One sample (SM clock MHz, power W, temperature C, ...), or None without NVML."""
        if self.handle is None:
            return None
        nvml, handle = self.module, self.handle
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        try:
            sample = {
                "step": step,
                "unix_ns": time.time_ns(),
                "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                "max_sm_clock_mhz": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
                "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                "temperature_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            }
        except Exception as error:  # noqa: BLE001
            self.note = f"NVML sampling stopped: {error!r}"
            self.handle = None
            return None
        limit = self._optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        sample["power_limit_w"] = None if limit is None else limit / 1000
        sample["clock_reasons"] = None if reasons is None else self._optional(lambda: int(reasons(handle)))
        return sample


class _RunQueue:
    """Run-queue wait of the calling thread, ns, through one open schedstat descriptor per thread."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.available = os.path.exists(_SCHEDSTAT)

    def read(self) -> tuple[int, int]:
        """The calling thread's run-queue wait so far (ns) and times put on a core ((0, 0) where unknown)."""
        if not self.available:
            return 0, 0
        fd = getattr(self._local, "fd", None)
        try:
            if fd is None:
                fd = self._local.fd = os.open(_SCHEDSTAT, os.O_RDONLY)
            fields = os.pread(fd, 128, 0).split()
            return int(fields[1]), int(fields[2])
        except (OSError, ValueError, IndexError):
            self.available = False
            return 0, 0


READ_ORDER = (
    "reading a thread's CPU clock brings its scheduler accounting up to date, which preempts it, as the "
    "call returns, once it has used its slice; a preemption already due is served there too. So each "
    "end reads the wall clock on the action's side of the probe's system calls (first on entry, last on "
    "exit), and the exit reads the CPU clock before schedstat: a wait served at the probe's own reads "
    "falls inside the action's wall time and its run-queue wait alike"
)
"""Why a probe reads its clocks in this order.

Measured on this 2-core VM (kernel 6.18), a thread doing 128x128 matrix products beside a busy
loop on its core, timing each batch of 40 between reads:

- with schedstat read before the CPU clock at the exit, and the wall clock last (as the probe
  first did), 4.8 to 5.4 s of 6 s fell inside the batches' wall time with no context switch and no
  run-queue wait counted;
- timing each read of the exit on its own, 735 ms of 6 s were spent in the CPU clock's read, under
  25 ms in each of the others (schedstat, ``getrusage``);
- with the wall clock read right beside schedstat and the probe left after the action's label,
  wall = on-CPU + run-queue wait held, but the waits fell between the actions, where compute
  scoring does not see them (a hogged GPipe rank 0: 326 ms of actions for 839 ms of wait in the
  window, against 1,088 ms of actions before).
"""

_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)  # None without resource, or off Linux


def _switches() -> tuple[int, int]:
    """The calling thread's voluntary and involuntary context switches so far ((-1, -1) where unknown)."""
    if _RUSAGE_THREAD is None:
        return -1, -1
    usage = resource.getrusage(_RUSAGE_THREAD)
    return usage.ru_nvcsw, usage.ru_nivcsw


class _PeerThreads:
    """Run-queue wait of the process's other Python threads (named as the main thread is).

    A thread that holds the GIL while it waits for a core keeps the action's thread blocked: that
    wait is the host's, not the action's. Native threads (gloo's, the allocator's) are named apart
    and left out. The thread list is taken as the window opens and on every step's end.
    """

    def __init__(self, available: bool) -> None:
        self.available = available and os.path.isdir("/proc/self/task")
        self._fds: dict[str, int] = {}
        self.refresh()

    def refresh(self) -> None:
        """Open the schedstat of every other thread named as this process (once per thread)."""
        if not self.available:
            return
        try:
            me = str(threading.get_native_id())
            with open("/proc/self/comm", encoding="utf-8") as handle:
                name = handle.read()
            for tid in os.listdir("/proc/self/task"):
                if tid == me or tid in self._fds:
                    continue
                try:
                    with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as handle:
                        if handle.read() != name:
                            continue
                    self._fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
                except OSError:
                    continue  # the thread ended meanwhile
        except OSError:
            self.available = False

    def read_ns(self) -> int:
        """Their summed run-queue wait so far, ns (a thread that ended counts no more)."""
        total = 0
        for tid, fd in list(self._fds.items()):
            try:
                total += int(os.pread(fd, 128, 0).split()[1])
            except (OSError, ValueError, IndexError):
                os.close(fd)
                del self._fds[tid]
        return total

    def close(self) -> None:
        """Close every descriptor."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


class ProbeBuffer:
    """The probes of one capture window: created as it opens, written and closed as it closes."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, ...] | tuple[Any, ...]] = []
        self.gc = _GcClock()
        self.runq = _RunQueue()
        self.nvml = _Nvml()
        self.peers = _PeerThreads(self.runq.available)
        self.samples: list[dict[str, Any]] = []
        self.next_sample_ns = time.monotonic_ns() if self.nvml.handle is not None else 0
        """When an action's end may take the next NVML sample; 0 without NVML (nothing to sample)."""
        self.depth = 0
        self.window_opened_ns = time.monotonic_ns()
        self.window_start = self.runq.read()  # right after the wall clock: READ_ORDER
        self._window_closed: tuple[int, int, int] | None = None
        gc.callbacks.append(self.gc)

    def span(self, step: int, stage: int, kind: str, microbatch: int) -> _ActionProbe:
        """The probe of one action (a context manager)."""
        return _ActionProbe(self, step, stage, kind, microbatch)

    def take_sample(self, step: int) -> None:
        """One NVML sample, kept up to ``MAX_NVML_SAMPLES``; the next one at action ends is due
        ``NVML_INTERVAL_NS`` later (never, once NVML has stopped)."""
        sample = self.nvml.sample(step)
        if sample is None:
            self.next_sample_ns = 0
        elif len(self.samples) < MAX_NVML_SAMPLES:
            self.samples.append(sample)
        else:
            self.nvml.dropped += 1
        if self.next_sample_ns:
            self.next_sample_ns = time.monotonic_ns() + NVML_INTERVAL_NS

    def step_ended(self, step: int) -> None:
        """A captured step ended: refresh the thread list and take one NVML sample where a GPU is present."""
        self.peers.refresh()
        if self.next_sample_ns:
            self.take_sample(step)

    def close(self) -> None:
        """Stop counting GC pauses and sampling NVML (idempotent)."""
        if self.gc in gc.callbacks:
            gc.callbacks.remove(self.gc)
        self.nvml.stop()
        self.next_sample_ns = 0
        self.peers.close()

    def close_window(self) -> tuple[int, int, int]:
        """The window's run-queue wait (ns), dispatches and wall time (ns), taken on the thread that
        opened it at the first call (later calls give the same)."""
        if self._window_closed is None:
            wall = time.monotonic_ns() - self.window_opened_ns
            now = self.runq.read()  # right after the wall clock: READ_ORDER
            self._window_closed = (now[0] - self.window_start[0], now[1] - self.window_start[1], wall)
        return self._window_closed

    def header(self, rank: int) -> dict[str, Any]:
        """The file's first line (``PROBES_FORMAT``); the rows follow, one per line."""
        notes = [] if self.runq.available else ["no run-queue wait: /proc/thread-self/schedstat is unreadable"]
        if self.nvml.note is not None:
            notes.append(self.nvml.note)
        if self.nvml.dropped:
            notes.append(f"{self.nvml.dropped} NVML samples past the first {MAX_NVML_SAMPLES} were not kept")
        runq_ns, dispatches, wall_ns = self.close_window()
        return {
            "format": PROBES_FORMAT,
            "rank": rank,
            "columns": list(COLUMNS),
            "actions": len(self.rows),
            "window_runq_ns": runq_ns,
            "window_dispatches": dispatches,
            "window_wall_ns": wall_ns,
            "runq_available": self.runq.available,
            "gc_pauses": self.gc.pauses,
            "gc_ns": self.gc.total_ns,
            "nvml": self.samples,
            "notes": notes,
        }

    def write(self, out_dir: Path, rank: int) -> Path:
        """Write ``rank{r}.probes.jsonl.gz`` atomically (a temporary file renamed into place)."""
        self.close()
        target = out_dir / probes_name(rank)
        scratch = out_dir / f".{target.name}.{os.getpid()}.tmp"
        try:
            with gzip.open(scratch, "wt", encoding="utf-8", compresslevel=6) as handle:
                handle.write(json.dumps(self.header(rank), separators=(",", ":")) + "\n")
                handle.writelines(json.dumps(row, separators=(",", ":")) + "\n" for row in self.rows)
            os.replace(scratch, target)
        finally:
            if scratch.exists():
                scratch.unlink()
        return target


class _ActionProbe:
    """Reads the thread's clocks as one action enters and exits, and keeps the differences.

    The wall clock is read first on entry and last on exit, and the exit reads the CPU clock before
    schedstat (``READ_ORDER``).
    """

    __slots__ = ("buffer", "key", "start")

    def __init__(self, buffer: ProbeBuffer, step: int, stage: int, kind: str, microbatch: int) -> None:
        self.buffer = buffer
        self.key = (step, stage, kind, microbatch)
        self.start: tuple[int, int, tuple[int, int], int, int, tuple[int, int]] = (0, 0, (0, 0), 0, 0, (0, 0))

    def __enter__(self) -> None:
        buffer = self.buffer
        buffer.depth += 1
        wall, runq = time.monotonic_ns(), buffer.runq.read()
        cpu, peers = time.thread_time_ns(), buffer.peers.read_ns()
        self.start = (wall, cpu, runq, buffer.gc.total_ns, peers, _switches())

    def __exit__(self, *_: object) -> None:
        buffer = self.buffer
        cpu = time.thread_time_ns()  # may preempt the thread as it returns: schedstat, read next, counts it
        runq, dispatches = buffer.runq.read()
        (voluntary, involuntary), peers = _switches(), buffer.peers.read_ns()
        wall = time.monotonic_ns()
        wall0, cpu0, (runq0, dispatches0), gc0, peers0, (voluntary0, involuntary0) = self.start
        buffer.depth -= 1
        switched = (-1, -1) if voluntary < 0 else (voluntary - voluntary0, involuntary - involuntary0)
        buffer.rows.append(
            (*self.key, buffer.depth, wall - wall0, cpu - cpu0, runq - runq0, dispatches - dispatches0,
             buffer.gc.total_ns - gc0, max(0, peers - peers0), *switched)
        )
        if buffer.next_sample_ns and wall >= buffer.next_sample_ns:
            buffer.take_sample(self.key[0])
