"""The own clock and the probes reader on small frames and files: shared waits go, a rank's excess stays."""

from __future__ import annotations

import gzip
import json
import resource
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.probes import COLUMNS, PROBES_FORMAT, ProbeBuffer
from tracekit.errors import TracekitError
from tracekit.analysis.realized import REALIZED_SCHEMA
from tracekit.stragglers.own_clock import (
    OP_CLOCK_SCHEMA,
    RATE_TOLERANCE,
    clock_factors,
    judged_actions,
    kind_wait_rates,
    on_own_clock,
    op_clock,
    rank_contention,
)
from tracekit.trace.probes import PROBE_SCHEMA, WINDOW_SCHEMA, read_probes
from tracekit.whatif.case import OPS_SCHEMA


def _probes(rows: list[tuple]) -> pl.DataFrame:
    """rank, wall, cpu, runq, dispatches -> PROBE_SCHEMA rows (step 0, stage = rank, F, gc 0)."""
    return _probe_rows([(rank, 0, rank, "F", 0, *values, 0.0, 0.0) for rank, *values in rows])


def _probe_rows(rows: list[tuple]) -> pl.DataFrame:
    """Whole PROBE_SCHEMA rows (rank, step, stage, kind, microbatch, wall, cpu, runq, dispatches, gc,
    peer runq[, voluntary, involuntary]); without the switch counts, not recorded (an older file)."""
    unrecorded = (None, None)
    whole = [row if len(row) == len(PROBE_SCHEMA) else (*row, *unrecorded) for row in rows]
    return pl.DataFrame(whole, schema=PROBE_SCHEMA, orient="row")


def _window(rows: list[tuple[int, float, int]]) -> pl.DataFrame:
    return pl.DataFrame([(*row, None) for row in rows], schema=WINDOW_SCHEMA, orient="row")


def test_a_wait_every_rank_shares_is_left_out() -> None:
    # Every rank waits 2 ms per dispatch; each action was dispatched 3 times and waited 6 ms.
    probes = _probes([(rank, 16.0, 10.0, 6.0, 3) for rank in range(4)])
    window = _window([(rank, 200.0, 100) for rank in range(4)])

    factors = clock_factors(probes, window)

    assert factors["shared_runq_ms"].to_list() == [6.0] * 4  # all of it, within the tolerance


def test_a_rank_that_waits_longer_per_dispatch_keeps_the_excess() -> None:
    probes = _probes([(0, 16.0, 10.0, 6.0, 3), (1, 40.0, 10.0, 30.0, 3), (2, 16.0, 10.0, 6.0, 3)])
    window = _window([(0, 200.0, 100), (1, 1000.0, 100), (2, 200.0, 100)])

    factors = clock_factors(probes, window)
    contention = rank_contention(window)

    assert contention["latency_ms"].to_list() == [2.0, 10.0, 2.0]
    assert contention["latency_reference_ms"].to_list() == [6.0, 2.0, 6.0]
    hogged = factors.filter(pl.col("rank") == 1).row(0, named=True)
    # 3 dispatches at 1.25 x 2 ms (7.5), or its 10 ms on a core at 2 x the others' 0.6 ms per ms (12),
    # whichever is larger, are the host's; the rest of its 30 ms wait is its own.
    assert hogged["shared_runq_ms"] == pytest.approx(12.0)


def test_a_wait_within_the_spread_of_a_busy_host_is_the_host_s() -> None:
    # A uniformly busy host (a DualPipeV capture at load 10 to 12): waits per dispatch of 3.49,
    # 2.31, 3.37 and 1.85 ms. The third is 1.46x the median of the others, but not beyond their spread.
    latencies = [3.49, 2.31, 3.37, 1.85]
    window = _window([(rank, latency * 100, 100) for rank, latency in enumerate(latencies)])
    probes = _probes([(rank, 40.0, 10.0, 5 * latency, 5) for rank, latency in enumerate(latencies)])

    contention = rank_contention(window)
    factors = clock_factors(probes, window)

    # Rank 2's others: 1.85, 2.31, 3.49; their upper quartile 2.90, times the tolerance 3.625.
    assert contention["latency_allowance_ms"][2] == pytest.approx(1.25 * 2.9)
    assert contention["latency_ms"][2] < contention["latency_allowance_ms"][2]
    # Every rank's wait within its allowance: all of it the host's.
    assert factors["shared_runq_ms"].to_list() == pytest.approx(factors["runq_ms"].to_list())


def test_uncounted_waits_every_rank_has_are_the_host_s_and_a_hogged_rank_keeps_its_own() -> None:
    # No dispatch counted in any action: ranks 0, 2, 3 lost 3 to 4 ms per ms on a core, rank 1 12.
    rates = [3.0, 12.0, 4.0, 3.5]
    probes = _probes([(rank, 2.0 + 2.0 * rate, 2.0, 0.0, 0) for rank, rate in enumerate(rates)])
    window = _window([(rank, 100.0, 100) for rank in range(4)])

    contention = rank_contention(window, probes)
    factors = clock_factors(probes, window)

    assert contention["uncounted_rate"].to_list() == pytest.approx(rates)
    # Rank 0's others: 3.5, 4, 12; their upper quartile 8, so all of its 6 ms are the host's.
    assert factors["shared_runq_ms"].to_list()[0::2] == pytest.approx([6.0, 8.0])
    hogged = factors.filter(pl.col("rank") == 1).row(0, named=True)
    # Its others: 3, 3.5, 4 -> 1.25 x 3.75 per ms on a core over the window, or 2 x 3.75 in its kind
    # (the larger), of its 2 ms: 15 of its 24 ms.
    assert hogged["shared_runq_ms"] == pytest.approx(15.0)


def test_hogged_ranks_among_many_do_not_hide_one_another() -> None:
    # Two of eight ranks beside a busy process wait 10 ms per dispatch, the others 2 to 2.6.
    latencies = [2.0, 10.0, 2.2, 2.4, 10.0, 2.6, 2.1, 2.3]
    window = _window([(rank, latency * 100, 100) for rank, latency in enumerate(latencies)])

    contention = rank_contention(window)

    for hogged in (1, 4):
        assert contention["latency_allowance_ms"][hogged] < 4.0  # the other hogged rank is past the quartile


def test_the_same_work_waiting_alike_per_ms_on_a_core_is_the_host_s() -> None:
    # A busy host: F&B actions use up their slice and wait 5 to 6.5 ms per dispatch, far above the
    # window's 2 to 3.5 ms (mostly short waits after wake-ups); per ms on a core, 2.5 to 4.3 alike.
    rates = [3.9, 3.4, 4.3, 2.5]
    probes = _probe_rows(
        [(rank, 0, rank, "F&B", 0, 20.0, 4.0, 4.0 * rate, 3, 0.0, 0.0) for rank, rate in enumerate(rates)]
    )
    window = _window([(rank, latency * 100, 100) for rank, latency in enumerate([3.5, 2.3, 3.4, 1.9])])

    factors = clock_factors(probes, window)

    # Rank 2's per dispatch, 5.7 ms, is beyond its allowance of 4.3; per ms on a core, 4.3 is within
    # 2x the others' upper quartile (3.65): all of its wait is the host's.
    assert contention_of(window)[2] < 17.2 / 3
    assert kind_wait_rates(probes)["wait_rate_allowance"][2] == pytest.approx(RATE_TOLERANCE * 3.65)
    assert factors["shared_runq_ms"].to_list() == pytest.approx(factors["runq_ms"].to_list())


def contention_of(window: pl.DataFrame) -> list[float]:
    return rank_contention(window)["latency_allowance_ms"].to_list()


def test_a_hogged_rank_waits_beyond_the_others_per_ms_on_a_core_too() -> None:
    probes = _probe_rows(
        [(rank, 0, rank, "F", 0, 60.0, 4.0, 4 * rate, 3, 0.0, 0.0) for rank, rate in enumerate((1, 12, 1.2))]
    )
    window = _window([(rank, 200.0, 100) for rank in range(3)])

    hogged = clock_factors(probes, window).filter(pl.col("rank") == 1).row(0, named=True)

    # Per dispatch 1.25 x 2 ms x 3 = 7.5; per ms on a core 2 x 1.15 (the upper quartile of 1 and 1.2)...
    assert hogged["wait_rate_allowance"] == pytest.approx(RATE_TOLERANCE * 1.15)
    # ... x 4 ms = 9.2, the larger: 38.8 of its 48 ms stay its own.
    assert hogged["shared_runq_ms"] == pytest.approx(9.2)


def test_a_kind_only_one_rank_has_is_judged_against_the_others_busiest_kind() -> None:
    probes = _probe_rows(
        [(0, 0, 0, "I", 0, 20.0, 4.0, 12.0, 2, 0.0, 0.0), (1, 0, 1, "F", 0, 20.0, 4.0, 4.0, 2, 0.0, 0.0)]
    )

    factors = clock_factors(probes, _window([(0, 200.0, 100), (1, 200.0, 100)]))

    # Rank 0's I against rank 1's busiest kind (F, 1 ms per ms on a core): 2 x 1 x 4 ms = 8 of its 12;
    # rank 1's F against rank 0's I (3 per ms): all of its 4.
    assert factors["wait_rate_allowance"].to_list() == pytest.approx([RATE_TOLERANCE * 1, RATE_TOLERANCE * 3])
    assert factors["shared_runq_ms"].to_list() == pytest.approx([8.0, 4.0])


def test_a_kind_run_back_to_back_is_allowed_what_the_others_waited_in_their_busiest_kind() -> None:
    # 1F1B at load 11: the last stage runs each forward straight into its backward and its backwards
    # wait 13 ms per ms on a core; the other stages' backwards follow a sleep (0.1 to 1 ms per ms),
    # their warm-up forwards run back to back (3 to 10 ms per ms).
    rows = [(3, 0, 3, "B", 0, 150.0, 10.0, 130.0, 1, 0.0, 0.0), (3, 0, 3, "F", 0, 8.0, 8.0, 0.0, 0, 0.0, 0.0)]
    for rank, backward, forward in ((0, 0.1, 10.0), (1, 1.0, 3.0), (2, 0.7, 6.0)):
        rows += [(rank, 0, rank, "B", 0, 20.0, 10.0, 10.0 * backward, 1, 0.0, 0.0),
                 (rank, 0, rank, "F", 0, 70.0, 6.0, 6.0 * forward, 1, 0.0, 0.0)]  # fmt: skip

    factors = clock_factors(_probe_rows(rows), _window([(rank, 400.0, 100) for rank in range(4)]))

    last = factors.filter((pl.col("rank") == 3) & (pl.col("kind") == "B")).row(0, named=True)
    # The others' busiest kinds: 10, 3 and 6 ms per ms on a core; 2 x their upper quartile, 8, x 10 ms.
    assert last["wait_rate_allowance"] == pytest.approx(RATE_TOLERANCE * 8.0)
    assert last["shared_runq_ms"] == pytest.approx(130.0)


def test_a_rank_whose_kind_waits_within_its_allowance_keeps_none_of_it_however_it_falls() -> None:
    # Rank 0's two forwards wait 2 and 10 ms for 4 dispatches each: 1.5 ms per dispatch over the kind,
    # within 1.25 x 2 ms, though the second alone is 2.5 ms per dispatch.
    rows = [(0, 0, 0, "F", 0, 20.0, 5.0, 2.0, 4, 0.0, 0.0), (0, 1, 0, "F", 0, 20.0, 5.0, 10.0, 4, 0.0, 0.0),
            (1, 0, 1, "F", 0, 20.0, 5.0, 8.0, 4, 0.0, 0.0), (1, 1, 1, "F", 0, 20.0, 5.0, 8.0, 4, 0.0, 0.0)]
    probes = _probe_rows(rows)

    factors = clock_factors(probes, _window([(0, 200.0, 100), (1, 200.0, 100)]))

    assert factors["shared_runq_ms"].to_list() == pytest.approx([2.0, 10.0, 8.0, 8.0])


def _ops(durations: list[float], compute: bool = True, kind: str = "F") -> pl.DataFrame:
    return pl.DataFrame(
        [(0, 0, 0, 0, 0, 0, 0, kind, kind, "median", compute, "first", ms, 0.0) for ms in durations],
        schema=OPS_SCHEMA,
        orient="row",
    )


def _op_clock(rows: list[tuple[int, float, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=OP_CLOCK_SCHEMA, orient="row")


def test_the_host_s_wait_comes_out_of_the_compute_op_down_to_its_time_on_a_core() -> None:
    # Three actions: 12 ms of the host's wait in a 15 ms op with 4 on a core; 5 of it in a 20 ms op
    # (11 ms stay: a sleep inside); and a transfer, which keeps its time.
    ops = pl.concat([_ops([15.0, 20.0]), _ops([15.0], compute=False)])

    judged = on_own_clock(ops, _op_clock([(0, 4.0, 12.0), (1, 4.0, 5.0), (2, 0.0, 9.0)]))

    assert judged["duration_ms"].to_list() == pytest.approx([4.0, 15.0, 15.0])


def test_each_op_takes_its_own_action_s_share_of_the_host_s_wait() -> None:
    # Rank 0: two forwards on stage 0, micro-batches 0 and 1, and an overlapped pair (stage 1's forward of
    # micro-batch 2 with its backward of micro-batch 0), whose probe is its forward half's, kind F&B.
    actions = pl.DataFrame(
        [(0, 0, 0, 0, "F", 0, 0, 1, False, "t"), (0, 0, 0, 0, "F", 1, 1, 2, False, "t"),
         (0, 0, 0, 1, "F", 2, 2, 3, True, "t"), (0, 0, 0, 1, "B", 0, 2, 3, True, "t")],
        schema=REALIZED_SCHEMA, orient="row",
    )  # fmt: skip
    probes = _probe_rows(
        [(0, 0, 0, "F", 0, 10.0, 2.0, 8.0, 2, 0.0, 0.0), (0, 0, 0, "F", 1, 4.0, 2.0, 2.0, 2, 0.0, 0.0),
         (0, 0, 1, "F&B", 2, 9.0, 3.0, 6.0, 3, 0.0, 0.0)]
    )  # fmt: skip
    judged = judged_actions(probes, rank_contention(_window([(0, 1000.0, 100)]), probes))

    clock = op_clock(judged, actions, np.array([0, 1, 2, 2]))

    # One rank alone: its own 10 ms per dispatch times the tolerance covers every wait.
    assert clock.rows() == [(0, 2.0, 8.0), (1, 2.0, 2.0), (2, 3.0, 6.0)]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.01, 100), st.floats(0, 1), st.floats(0, 1), st.integers(0, 20)), min_size=1, max_size=6
    ),
    st.lists(st.tuples(st.floats(0, 1000), st.integers(0, 500)), min_size=6, max_size=6),
)
def test_the_judged_time_lies_between_the_own_time_and_the_wall(actions, windows) -> None:
    rows = [(rank, wall, wall * cpu * (1 - queue), wall * queue, n) for rank, (wall, cpu, queue, n) in enumerate(actions)]
    factors = clock_factors(_probes(rows), _window([(rank, *window) for rank, window in enumerate(windows)]))

    judged = factors["wall_ms"] - factors["shared_runq_ms"]
    assert ((judged <= factors["wall_ms"] + 1e-9) & (judged >= factors["wall_ms"] - factors["runq_ms"] - 1e-9)).all()


def test_a_python_thread_waiting_for_a_core_while_the_action_is_blocked_is_waiting() -> None:
    probes = _probe_rows(
        [(0, 0, 0, "F", 0, 20.0, 5.0, 1.0, 1, 0.0, 30.0), (1, 0, 1, "F", 0, 20.0, 5.0, 1.0, 1, 0.0, 4.0)]
    )

    factors = clock_factors(probes, _window([(0, 1.0, 1), (1, 1.0, 1)]))

    # Rank 0 was blocked 14 ms while its other threads waited 30: all 14 are waiting; rank 1's 4 are.
    assert factors["runq_ms"].to_list() == [15.0, 5.0]


def test_an_action_never_put_back_on_a_core_waited_for_one_and_keeps_that_wait() -> None:
    # Rank 0: an action with 3 ms on a core in 33 ms and no dispatch counted (a busy process ran in
    # between, uncounted), and one dispatched twice; rank 1 was dispatched once, so its 10 ms off a
    # core beyond its counted wait may be a sleep. Rank 2 waited 1 ms per ms on a core.
    probes = _probes(
        [(0, 33.0, 3.0, 0.0, 0), (0, 10.0, 5.0, 2.0, 2), (1, 33.0, 3.0, 20.0, 1), (2, 20.0, 8.0, 8.0, 4)]
    )

    factors = clock_factors(probes, _window([(0, 10.0, 10), (1, 10.0, 10), (2, 10.0, 10)]))

    assert factors["runq_ms"].to_list() == [32.0, 20.0, 8.0]
    # Rank 0 waited 4 ms per ms on a core, the others 6.7 and 1: its allowance, 2 x 5.25 per ms on a
    # core (their upper quartile), covers its 32 ms. Rank 1's, 2 x 3.25, covers 19.5 of its 20.
    assert kind_wait_rates(probes)["wait_rate"].to_list() == pytest.approx([4.0, 20 / 3, 1.0])
    assert factors["shared_runq_ms"].to_list() == pytest.approx([32.0, 2 * 3.25 * 3, 8.0])


def test_an_action_that_never_slept_waited_for_a_core_all_its_time_off_one() -> None:
    # Each rank's action: 3 ms on a core in 33, 2 ms of wait counted over one dispatch (schedstat
    # missed the other preemptions). Rank 0 made no voluntary switch (preempted 3 times, never
    # slept); rank 1 slept once; rank 2's switches were not recorded (an older file): judged by its
    # one dispatch, it may have slept.
    probes = _probe_rows(
        [(0, 0, 0, "F", 0, 33.0, 3.0, 2.0, 1, 0.0, 0.0, 0, 3),
         (1, 0, 1, "F", 0, 33.0, 3.0, 2.0, 1, 0.0, 0.0, 1, 2),
         (2, 0, 2, "F", 0, 33.0, 3.0, 2.0, 1, 0.0, 0.0)]
    )  # fmt: skip

    judged = judged_actions(probes, rank_contention(_window([(rank, 10.0, 10) for rank in range(3)]), probes))

    assert judged["uncounted_ms"].to_list() == [28.0, 0.0, 0.0]
    assert judged["never_slept_cpu_ms"].to_list() == [3.0, 0.0, 0.0]
    assert clock_factors(probes, _window([(rank, 10.0, 10) for rank in range(3)]))["runq_ms"].to_list() == [
        30.0, 2.0, 2.0
    ]  # fmt: skip


def test_an_action_never_put_back_on_a_core_beside_peers_that_lost_none_keeps_its_wait() -> None:
    # Rank 0 lost 30 ms uncounted in 3 ms on a core; its peers waited 1 ms per ms on a core.
    probes = _probes([(0, 33.0, 3.0, 0.0, 0), (1, 20.0, 8.0, 8.0, 4), (2, 20.0, 8.0, 8.0, 4)])

    factors = clock_factors(probes, _window([(0, 10.0, 10), (1, 10.0, 10), (2, 10.0, 10)]))

    assert factors["runq_ms"].to_list() == [30.0, 8.0, 8.0]
    assert factors["shared_runq_ms"][0] == pytest.approx(RATE_TOLERANCE * 1.0 * 3.0)  # 24 of its 30 stay


def test_the_collector_writes_what_the_reader_reads(tmp_path: Path) -> None:
    buffer = ProbeBuffer()
    try:
        for microbatch in range(3):
            with buffer.span(0, 1, "F", microbatch):
                sum(range(20_000))
                if microbatch == 1:
                    time.sleep(0.002)
        buffer.step_ended(0)
    finally:
        buffer.close()
    buffer.write(tmp_path, 1)

    probes = read_probes(tmp_path, (0, 1))

    assert probes is not None and probes.ranks == (1,)
    assert probes.actions["microbatch"].to_list() == [0, 1, 2]
    assert (probes.actions["cpu_ms"] > 0).all() and (probes.actions["cpu_ms"] <= probes.actions["wall_ms"]).all()
    assert probes.window["rank"].to_list() == [1]
    assert any("rank 0" in note and "no probes file" in note for note in probes.notes)
    if hasattr(resource, "RUSAGE_THREAD"):
        assert probes.actions["voluntary"].to_list()[1] >= 1  # it slept
        assert (probes.actions["involuntary"] >= 0).all()


def test_a_file_without_switch_counts_reads_them_as_unknown(tmp_path: Path) -> None:
    older = list(COLUMNS[:-2])
    _write(tmp_path / "rank0.probes.jsonl.gz", [_header(columns=older), "[0,0,\"F\",0,0,5000000,1000000,0,0,0,0]"])

    probes = read_probes(tmp_path, (0,))

    assert probes is not None
    assert probes.actions.select("voluntary", "involuntary").row(0) == (None, None)
    assert probes.actions["wall_ms"].to_list() == [5.0]


def _write(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join(lines) + "\n")


def _header(**changes: object) -> str:
    header = {"format": PROBES_FORMAT, "rank": 0, "columns": list(COLUMNS), "actions": 1, "runq_available": True,
              "window_runq_ns": 0, "window_dispatches": 0, "nvml": [], "notes": []} | changes  # fmt: skip
    return json.dumps(header)


@pytest.mark.parametrize(
    ("lines", "fault"),
    [
        ([_header(format="other/9"), "[0,0,\"F\",0,0,1,1,0,0,0,0,0,0]"], "not a tracekit-probes/1"),
        ([_header(), "[0,0,\"F\"]"], "line 2: not a probe row"),
        ([_header(actions=2), "[0,0,\"F\",0,0,1,1,0,0,0,0,0,0]"], "header says 2 actions"),
        (["{not json"], "probes header is not JSON"),
    ],
)
def test_a_bad_probes_file_is_refused_in_one_line_naming_it(tmp_path: Path, lines: list[str], fault: str) -> None:
    _write(tmp_path / "rank0.probes.jsonl.gz", lines)

    with pytest.raises(TracekitError, match=fault) as raised:
        read_probes(tmp_path, (0,))

    assert "rank0.probes.jsonl.gz" in str(raised.value) and "\n" not in str(raised.value)
