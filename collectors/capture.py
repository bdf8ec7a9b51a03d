"""Capture a window of training steps on one rank: profiler on, labels on, trace and sidecar out.

A ``Recorder`` counts training steps (one step = one call of a schedule's ``step()``, or one
``collectors.step()`` block; a forward-only call, an evaluation, is not a training step: it is
counted apart and labels nothing, so no step with phantom backwards appears), starts torch.profiler before the first step of the window, stops it
after the last and writes ``rank{r}.json.gz`` (Kineto chrome trace, gzipped) and
``rank{r}.meta.json`` (what this rank knows: schedule, stages, steps, host, status) atomically.
While the window is open, the labels of docs/labels.md are emitted; outside it every hook is a flag
test and a call-through. In live mode (``tracekit record --live``) the recorder also holds a
``collectors.live.LiveTimer`` that times every step's actions, and opens a window when the live
aggregator asks for one (capture on anomaly, into a directory beside live.jsonl).

The process holds at most one current recorder (``current()``): the patched schedule methods
of ``collectors.patch_torch`` and ``collectors.patch_dualpipe`` run inside user code that cannot
pass one along, so they look it up here. ``Capture`` (``collectors.api``) makes one current for a
``with`` block; the
sitecustomize that ``tracekit record`` injects makes one for the whole process.

Not for reading traces or merging ranks (``collectors.manifest``), nor for patching (the patch
modules). Imports torch and the standard library only; never raises into the job: problems are
reported as one ``tracekit:`` line on stderr and end this rank's capture. A step that raises (a
signal, see ``collectors.stopping``, or a crash) is not counted: the trace is written as partial
and its sidecar names that step, where the analysis cuts the trace.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.autograd.profiler import record_function

from collectors import hooks, labels, probes
from collectors.aside import locked, move_aside
from collectors.files import (
    check_written,
    describe_os_error,
    gzip_file_atomic,
    overwrite_json,
    report,
    write_json_atomic,
)
from collectors.identity import int_env, rank_and_world_size, shared_run_id
from collectors.manifest import (
    INCOMING_PREFIX,
    RUN_ID_METADATA,
    RankEvalCalls,
    RankMemory,
    RankMeta,
    RankStatus,
    RankSteps,
    ScheduleInfo,
    sidecar_name,
    trace_name,
)
from collectors.memory import rank_memory
from collectors.stopping import DeferredSpan, SignalGuard
from collectors.typed_json import to_json
from collectors.window import DEFAULT_STEPS, parse_steps


@dataclass(frozen=True)
class CaptureConfig:
    """Where a capture writes and which steps it keeps."""

    out_dir: Path
    """Directory for rank{r}.json.gz and rank{r}.meta.json."""
    first_step: int = 1
    """First captured step (0-based count of step() calls in this process)."""
    stop_step: int | None = 3
    """One past the last captured step; None keeps every step until the process ends."""
    run_id: str | None = None
    """Identifier shared by the ranks of one ``tracekit record`` run; lets the merge skip stale sidecars."""
    schedule: ScheduleInfo | None = None
    """For custom loops: the schedule to record when no patched schedule describes itself."""
    staged: bool = False
    """Write into ``out_dir/.tracekit-incoming-RUNID`` and move each rank's files into ``out_dir``
    (an earlier run's files aside) once its trace is written: ``collectors.Capture``, which no
    ``tracekit record`` does this for."""
    profile_memory: bool = True
    """Record the profiler's memory events (docs/memory.md); TRACEKIT_PROFILE_MEMORY=0 turns them off."""
    probes: bool = True
    """Record the per-action probes (on-CPU time, run-queue wait, GC pauses, NVML samples:
    ``collectors.probes``) that straggler causes read; TRACEKIT_PROBES=0 turns them off."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_dir", Path(self.out_dir))
        if self.first_step < 0 or (self.stop_step is not None and self.stop_step <= self.first_step):
            raise ValueError(f"bad step window {self.first_step}:{self.stop_step}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> CaptureConfig | None:
        """The config ``tracekit record`` passes through TRACEKIT_OUT / TRACEKIT_STEPS / TRACEKIT_RUN_ID."""
        out = environ.get("TRACEKIT_OUT")
        if not out:
            return None
        first, stop = parse_steps(environ.get("TRACEKIT_STEPS", DEFAULT_STEPS))
        memory = environ.get("TRACEKIT_PROFILE_MEMORY", "1") != "0"
        probed = environ.get("TRACEKIT_PROBES", "1") != "0"
        return cls(
            Path(out), first, stop, environ.get("TRACEKIT_RUN_ID") or None, profile_memory=memory, probes=probed
        )

    def wants(self, step_index: int) -> bool:
        """True when step ``step_index`` is in the window."""
        return step_index >= self.first_step and (self.stop_step is None or step_index < self.stop_step)


@dataclass
class Recorder:
    """The per-process capture state machine: counts steps, runs the profiler, writes this rank's files."""

    config: CaptureConfig
    next_step: int = 0
    labelling: bool = False
    """True while the window is open: hooks emit labels only then."""
    _depth: int = 0
    _profiler: torch.profiler.profile | None = None
    _step_span: DeferredSpan | None = None
    _failed: bool = False
    _finished: bool = False
    _captured: int = 0
    _rank: int = 0
    _world_size: int = 1
    _schedule: ScheduleInfo | None = None
    _problems: list[str] = field(default_factory=list)
    _started_unix_ns: int = 0
    live: Any = None
    """The ``collectors.live.LiveTimer`` of ``tracekit record --live``: times every step's actions."""
    armed: bool = True
    """False: no window yet (live mode waits for the aggregator to ask for one)."""
    _live_dir: Path | None = None
    _last_step_end_unix_ns: int | None = None
    _unfinished_step: int | None = None
    """Window-relative index of the step that was running when the capture stopped, if one was."""
    _signals: SignalGuard = field(default_factory=SignalGuard)
    _eval_depth: int = 0
    _eval_calls: int = 0
    """Forward-only calls that ran while the profiler was on (left out of the captured steps)."""
    _eval_calls_seen: int = 0
    _located: bool = False
    _memory: RankMemory | None = None
    probes: Any = None
    """The open window's ``collectors.probes.ProbeBuffer`` (per-action clocks); None outside a window."""

    def begin_eval(self) -> None:
        """A forward-only call (evaluation) starts: not a training step; labels pause until it ends."""
        self._eval_depth += 1
        if self._eval_depth > 1:
            return
        self._locate()
        self._eval_calls_seen += 1
        if self._profiler is not None and self._depth == 0:
            self._eval_calls += 1

    def end_eval(self) -> None:
        """A forward-only call ends (also when it raised)."""
        self._eval_depth -= 1

    @contextlib.contextmanager
    def evaluation(self) -> Iterator[None]:
        """``begin_eval``/``end_eval`` around a block: a forward-only schedule call."""
        self.begin_eval()
        try:
            yield
        finally:
            self.end_eval()

    @property
    def evaluating(self) -> bool:
        """True while a forward-only call runs: nothing is labelled or timed."""
        return self._eval_depth > 0

    def _locate(self) -> None:
        """Learn this process's rank once, while its process group is still up (it may be gone at exit)."""
        if not self._located:
            self._located = True
            self._rank, self._world_size = rank_and_world_size()

    def begin_step(self, describe: Callable[[], ScheduleInfo | None] | None = None) -> None:
        """Called as a step starts; nested calls (a step() calling step()) count once."""
        self._depth += 1
        if self._depth > 1:
            return
        if self.live is not None:
            self.live.begin_step(self.next_step, describe)
        if self._failed or self._finished or not self.armed:
            return
        self._locate()
        if self._profiler is None and self.config.wants(self.next_step):
            self._start()
        if not self.labelling:
            return
        if describe is not None:
            self._remember_schedule(describe)
        span = DeferredSpan(record_function(labels.step_label(self.next_step - self.config.first_step)), self._signals)
        span.__enter__()
        self._step_span = span

    @property
    def signals(self) -> SignalGuard:
        """This rank's stop-signal guard: spans in the window enter and leave with signals deferred."""
        return self._signals

    def end_step(self, error: BaseException | None = None) -> None:
        """Called as a step ends; ``error`` is what it raised, if it did not finish.

        A step that did not finish is never counted: the capture stops there, as partial.
        """
        self._depth -= 1
        if self._depth > 0:
            return
        in_window = self._step_span is not None
        if in_window:
            span, self._step_span = self._step_span, None
            span.__exit__(None, None, None)
        if in_window and error is not None:
            self._unfinished_step = self.next_step - self.config.first_step
            self.next_step += 1
            unfinished = self._unfinished_step
            self._stop(
                complete=False,
                # Worded once the trace is written: the signal that stopped the rank is known by then.
                problem=lambda: f"step #{unfinished} of the window did not finish ({self._why(error)}); "
                "the trace is cut at its start",
            )
            return
        if in_window:
            self._captured += 1
            self._last_step_end_unix_ns = time.time_ns()
            if self.probes is not None:
                self.probes.step_ended(self.next_step - self.config.first_step)
        requests = [] if self.live is None else self.live.end_step(self.next_step)
        self.next_step += 1
        if self._profiler is not None and not self.config.wants(self.next_step):
            self._stop(complete=True)
        elif in_window:
            self._heartbeat()
        for request in requests:
            self._capture_requested(request)

    def _capture_requested(self, request: dict[str, Any]) -> None:
        """The live aggregator asks for a profiler capture of ``steps`` steps from ``first_step``."""
        if self._profiler is not None or self._failed:
            return
        try:
            first, count, name = int(request["first_step"]), int(request["steps"]), str(request["dir"])
        except (KeyError, TypeError, ValueError):
            self._problem(f"ignored a malformed capture request from the live aggregator: {request!r}")
            return
        if "/" in name or name.startswith(".") or count < 1:
            self._problem(f"ignored a capture request for {name!r}: not a plain directory name")
            return
        first = max(first, self.next_step)  # a request that arrives late starts at the next step
        if self._live_dir is None:
            self._live_dir = self.config.out_dir
        self.config = replace(
            self.config, out_dir=self._live_dir / name, first_step=first, stop_step=first + count
        )
        self.armed, self._finished, self._captured, self._problems = True, False, 0, []
        self._unfinished_step = self._last_step_end_unix_ns = None

    @property
    def _write_dir(self) -> Path:
        """Where this rank's files are written: the capture directory, or its incoming one when staged."""
        if not self.config.staged:
            return self.config.out_dir
        return self.config.out_dir / f"{INCOMING_PREFIX}{self.config.run_id or 'unknown'}"

    def _why(self, error: BaseException) -> str:
        if self._signals.received is not None:
            return f"interrupted by {self._signals.received}"
        if isinstance(error, KeyboardInterrupt):
            return "interrupted by SIGINT"
        return f"it raised {type(error).__name__}"

    def _how_stopped(self) -> str:
        return f" ({self._why(KeyboardInterrupt())})" if self._signals.received else ""

    def _heartbeat(self) -> None:
        """Rewrite the sidecar after each captured step, so a rank that dies says where it stopped."""
        self._signals.begin_writing()
        try:
            self._write_sidecar("capturing")
        except OSError:
            pass  # the next write (the trace) reports the fault, or the sidecar keeps its last state
        finally:
            self._signals.end_writing()

    def finish(self) -> None:
        """End of the job or of a ``Capture`` block: write what an unfinished window holds."""
        self._signals.exiting()
        if self._step_span is not None:
            # The job is ending inside a step (sys.exit from the loop): close its span so it
            # exports, and say the trace is cut there.
            span, self._step_span = self._step_span, None
            span.__exit__(None, None, None)
            self._unfinished_step = self.next_step - self.config.first_step
        if self._profiler is not None:
            whole = self._unfinished_step is None and self._signals.received is None
            if self.config.stop_step is None and self._captured and whole:
                self._stop(complete=True)
            else:
                wanted = (
                    "until the end"
                    if self.config.stop_step is None
                    else self.config.stop_step - self.config.first_step
                )
                captured = self._captured
                self._stop(
                    complete=False,
                    problem=lambda: f"the job ended{self._how_stopped()} after {captured} of {wanted} "
                    "requested steps",
                )
        elif (
            self.armed
            and not self._finished
            and not self._failed
            and (self.next_step or self._eval_calls_seen)
        ):
            self._write_not_reached()
        self._finished = True
        if self.live is not None:
            live, self.live = self.live, None
            live.close()

    def _write_not_reached(self) -> None:
        """A recognized schedule ran, but never inside the window: say so, so the merge can tell."""
        try:
            self._write_dir.mkdir(parents=True, exist_ok=True)
            self._write_sidecar("not-reached")
        except OSError as error:
            report(f"rank {self._rank}: cannot write to {self.config.out_dir}: {error}")

    def _remember_schedule(self, describe: Callable[[], ScheduleInfo | None]) -> None:
        try:
            info = describe()
        except Exception as error:  # noqa: BLE001 - an unknown schedule version must not stop training
            self._problem(f"could not describe the schedule: {error!r}")
            return
        if info is None or info == self._schedule:
            return
        if self._schedule is not None:
            self._problem(
                f"schedule changed from {self._schedule.class_name} to {info.class_name} inside the window"
            )
        self._schedule = info

    def _problem(self, message: str) -> None:
        if message in self._problems:
            return
        self._problems.append(message)
        report(f"rank {self._rank}: {message}")

    def _start(self) -> None:
        self._schedule = self._schedule or self.config.schedule
        if self.config.run_id is None:
            self.config = replace(self.config, run_id=shared_run_id())
        self._started_unix_ns = time.time_ns()
        try:
            self._write_dir.mkdir(parents=True, exist_ok=True)
            self._write_sidecar("capturing")
        except OSError as error:
            why = describe_os_error(error)
            self._fail(f"cannot write to {self.config.out_dir}: {why}; training continues without a trace")
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            profiler = torch.profiler.profile(
                activities=activities,
                record_shapes=False,
                with_stack=False,
                profile_memory=self.config.profile_memory,
            )
            profiler.start()
        except Exception as error:  # noqa: BLE001 - e.g. another profiler already running
            self._fail(f"cannot start torch.profiler: {error!r}; training continues without a trace")
            return
        with contextlib.suppress(Exception):  # an older profiler without metadata: the sidecar still says
            profiler.add_metadata(RUN_ID_METADATA, self.config.run_id or "")
        self._profiler = profiler
        try:
            self.probes = probes.ProbeBuffer() if self.config.probes else None
        except Exception as error:  # noqa: BLE001 - probes are extra: the trace goes on without them
            self._problem(f"per-action probes are off: {error!r}")
        self.labelling = True
        if self.live is not None:
            self.live.profiling = True
        self._signals.install()

    def _stop(self, complete: bool, problem: Callable[[], str] | None = None) -> None:
        self._signals.begin_writing()
        try:
            self._write_trace(complete, problem)
        finally:
            self._signals.uninstall()
            self._signals.end_writing()

    def _write_trace(self, complete: bool, problem: Callable[[], str] | None) -> None:
        profiler, self._profiler = self._profiler, None
        self.labelling = False
        if self.live is not None:
            self.live.profiling = False
        assert profiler is not None
        if self.probes is not None:
            with contextlib.suppress(Exception):  # never into the job: the header then reads the window later
                self.probes.close_window()  # before the export, whose waits are not the job's
        name = trace_name(self._rank, complete)
        target = self._write_dir / name
        shown = self.config.out_dir / name  # what the user asked for, not the hidden staging path
        try:
            profiler.stop()
            self._memory = rank_memory(self.config.profile_memory)
            with tempfile.TemporaryDirectory(prefix=".tracekit-", dir=self._write_dir) as scratch:
                raw = Path(scratch) / "trace.json"
                profiler.export_chrome_trace(str(raw))
                check_written(raw, self._write_dir)
                gzip_file_atomic(raw, target)
            self._write_probes()
        except OSError as error:
            self._fail(
                f"cannot write {shown}: {describe_os_error(error)}; training continues without this trace"
            )
            return
        except Exception as error:  # noqa: BLE001 - a profiler error must not stop training
            self._fail(f"cannot write {shown}: {error!r}; training continues without this trace")
            return
        if problem is not None:
            self._problem(problem())
        try:
            self._write_sidecar("complete" if complete else "partial", trace=name)
        except OSError as error:
            self._fail(f"cannot write the sidecar of {shown}: {describe_os_error(error)}")
        self._finished = True
        if self.config.staged and not self._failed:
            self._promote(name)

    def _promote(self, trace: str) -> None:
        """Staged: move this rank's files into the capture directory, another run's files aside first."""
        final, incoming = self.config.out_dir, self._write_dir
        try:
            with locked(final):
                moved_to = move_aside(final, keep_run_id=self.config.run_id)
                for name in (trace, sidecar_name(self._rank), probes.probes_name(self._rank)):
                    if name != trace and not (incoming / name).exists():
                        continue  # no probes (they failed, or none were taken): the trace goes on alone
                    os.replace(incoming / name, final / name)
        except OSError as error:
            why = describe_os_error(error)
            self._problem(f"cannot move this rank's files into {final} ({why}); they are in {incoming}")
            return
        if moved_to is not None:
            report(f"rank {self._rank}: moved the earlier capture in {final} to {moved_to}")
        with contextlib.suppress(OSError):
            incoming.rmdir()  # the last rank out removes it; a rank still writing keeps it

    def _write_probes(self) -> None:
        """Write the window's probes beside the trace; a fault there costs the probes, not the trace."""
        buffer, self.probes = self.probes, None
        if buffer is None:
            return
        try:
            buffer.write(self._write_dir, self._rank)
        except Exception as error:  # noqa: BLE001 - never into the job
            buffer.close()
            self._problem(f"cannot write {probes.probes_name(self._rank)}: {error!r}")

    def _fail(self, message: str) -> None:
        self._failed = True
        self.labelling = False
        if self.probes is not None:
            self.probes.close()
            self.probes = None
        if self.live is not None:
            self.live.profiling = False
        if self._profiler is not None:
            with contextlib.suppress(Exception):
                self._profiler.stop()
            self._profiler = None
        self._signals.uninstall()
        self._problem(message)
        with contextlib.suppress(OSError):
            self._write_sidecar("failed", overwrite=True)

    def _write_sidecar(self, status: RankStatus, trace: str | None = None, overwrite: bool = False) -> None:
        meta = RankMeta(
            run_id=self.config.run_id,
            rank=self._rank,
            world_size=self._world_size,
            local_rank=int_env("LOCAL_RANK"),
            host=socket.gethostname(),
            pid=os.getpid(),
            torch_version=torch.__version__,
            status=status,
            trace=trace,
            problems=tuple(self._problems),
            collector_problems=hooks.problems(),
            interrupted_by=self._signals.received,
            steps=RankSteps(
                requested=(self.config.first_step, self.config.stop_step),
                captured=(self.config.first_step, self.config.first_step + self._captured),
                unfinished=self._unfinished_step,
                last_end_unix_ns=self._last_step_end_unix_ns,
                seen=self.next_step,
            ),
            eval_calls=RankEvalCalls(in_window=self._eval_calls, seen=self._eval_calls_seen),
            schedule=self._schedule,
            started_unix_ns=self._started_unix_ns,
            written_unix_ns=time.time_ns(),
            memory=self._memory,
        )
        write = overwrite_json if overwrite else write_json_atomic
        write(self._write_dir / sidecar_name(self._rank), to_json(meta))


_current: Recorder | None = None
_env_checked = False


def current() -> Recorder | None:
    """The recorder hooks report to, or None when nothing is being captured."""
    if _current is None and not _env_checked:
        _adopt_env_recorder()
    return _current


def labelling() -> bool:
    """True while a capture window is open: the one flag every labelling hook tests."""
    recorder = current()
    return recorder is not None and recorder.labelling and not recorder.evaluating


def watching() -> bool:
    """True while actions are labelled (a capture window) or timed (live mode): the hooks' one test."""
    recorder = current()
    return (
        recorder is not None and not recorder.evaluating and (recorder.labelling or recorder.live is not None)
    )


def _adopt_env_recorder() -> None:
    """Under ``tracekit record`` (TRACEKIT_OUT set), make the process-wide recorder, once."""
    global _current, _env_checked
    _env_checked = True
    try:
        config = CaptureConfig.from_env(os.environ)
    except ValueError as error:
        report(f"capture disabled: {error}")
        return
    if config is None:
        return
    from collectors import live

    timer = live.from_env(os.environ, rank_and_world_size)
    # Live mode without --steps: no window until the aggregator asks for one.
    _current = Recorder(config, live=timer, armed=timer is None or "TRACEKIT_STEPS" in os.environ)
    # A normal exit writes what an unfinished window holds (e.g. TRACEKIT_STEPS=all).
    atexit.register(_current.finish)


def set_current(recorder: Recorder | None) -> Recorder | None:
    """Make ``recorder`` current; returns the one it replaces."""
    global _current
    previous, _current = _current, recorder
    return previous
