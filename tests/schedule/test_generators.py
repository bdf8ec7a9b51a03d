"""Generated orders against the implementations they follow: torch's schedules, DeepSeek's DualPipe, the ZB paper."""

from __future__ import annotations

import re

import pytest

from tracekit.schedule.dualpipe import dualpipe, dualpipev, fold_dualpipe
from tracekit.schedule.model import ScheduleError, missing_actions
from tracekit.schedule.registry import GENERATORS, generate

from .reference_orders import deepseek_dualpipe_order, torch_order


def _text(name: str, pp: int, microbatches: int, chunks: int | None = None) -> list[list[str]]:
    return [[str(step) for step in steps] for steps in generate(name, pp, microbatches, chunks).steps]


@pytest.mark.parametrize(
    ("name", "torch_name", "pp", "microbatches", "chunks"),
    [
        ("gpipe", "GPipe", 2, 3, None),
        ("gpipe", "GPipe", 4, 8, None),
        ("interleaved-1f1b", "Interleaved1F1B", 2, 4, 2),
        ("interleaved-1f1b", "Interleaved1F1B", 4, 8, 2),
        ("interleaved-1f1b", "Interleaved1F1B", 4, 8, 3),
        ("interleaved-1f1b", "Interleaved1F1B", 4, 6, 2),
        ("interleaved-1f1b", "Interleaved1F1B", 4, 3, 2),
        ("interleaved-1f1b", "Interleaved1F1B", 8, 16, 4),
        ("zbv", "ZBVZeroBubble", 2, 3, 2),
        ("zbv", "ZBVZeroBubble", 4, 8, 2),
        ("zbv", "ZBVZeroBubble", 3, 7, 2),
        ("zbv", "ZBVZeroBubble", 4, 12, 2),
        ("dualpipev", "DualPipeV", 2, 4, 2),
        ("dualpipev", "DualPipeV", 4, 8, 2),
        ("dualpipev", "DualPipeV", 3, 7, 2),
        ("dualpipev", "DualPipeV", 8, 20, 2),
    ],
)
def test_order_matches_torch(
    name: str, torch_name: str, pp: int, microbatches: int, chunks: int | None
) -> None:
    expected = torch_order(torch_name, pp, microbatches, chunks)

    actual = _text(name, pp, microbatches, chunks if name == "interleaved-1f1b" else None)

    assert actual == expected


@pytest.mark.parametrize(("pp", "microbatches"), [(2, 3), (4, 4), (4, 8), (5, 12)])
def test_1f1b_matches_torch_but_its_last_rank_off_by_one(pp: int, microbatches: int) -> None:
    # torch's Schedule1F1B._get_pipeline_order numbers the last rank's forwards from 1 (it starts
    # its counter at 0 and increments before use when there is no warm-up); its runtime runs 0..M-1.
    expected = torch_order("1F1B", pp, microbatches)
    last = expected[-1]
    assert [a for a in last if "F" in a] == [f"{pp - 1}F{mb + 1}" for mb in range(microbatches)]
    expected[-1] = [f"{pp - 1}F{int(a.split('F')[1]) - 1}" if "F" in a else a for a in last]

    actual = _text("1f1b", pp, microbatches)

    assert actual == expected


@pytest.mark.parametrize(("pp", "microbatches"), [(2, 4), (4, 8), (4, 10), (6, 12), (8, 16), (8, 34)])
def test_dualpipe_matches_deepseek_step(pp: int, microbatches: int) -> None:
    expected = deepseek_dualpipe_order(pp, microbatches)

    actual = _text("dualpipe", pp, microbatches)

    assert actual == expected


@pytest.mark.parametrize(("pp", "microbatches"), [(1, 2), (2, 4), (4, 8), (3, 7), (4, 9)])
def test_dualpipe_on_2p_ranks_runs_dualpipev_on_its_first_half(pp: int, microbatches: int) -> None:
    folded = fold_dualpipe(dualpipe(2 * pp, 2 * microbatches))

    assert folded.steps == dualpipev(pp, microbatches).steps


def test_zb_h1_and_zb_h2_are_the_zero_bubble_paper_figure_3() -> None:
    # Zero Bubble paper (arXiv 2401.10241) Figure 3, p=4, m=8, written 0-based; B in the figure is our I.
    h1_first = (
        "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7"
    )
    h1_last = (
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7"
    )
    h2_first = (
        "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0I0 0W0 0F7 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7"
    )
    h2_last = (
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3F4 3I4 3F5 3I5 3F6 3I6 3W0 3F7 3I7 3W1 3W2 3W3 3W4 3W5 3W6 3W7"
    )

    h1, h2 = _text("zb-h1", 4, 8), _text("zb-h2", 4, 8)

    assert (" ".join(h1[0]), " ".join(h1[3])) == (h1_first, h1_last)
    assert (" ".join(h2[0]), " ".join(h2[3])) == (h2_first, h2_last)


@pytest.mark.parametrize("name", list(GENERATORS))
@pytest.mark.parametrize(("pp", "microbatches"), [(2, 4), (4, 8), (4, 12), (6, 24)])
def test_every_action_once(name: str, pp: int, microbatches: int) -> None:
    schedule = generate(name, pp, microbatches)

    assert missing_actions(schedule) == []


@pytest.mark.parametrize(
    ("name", "pp", "microbatches", "chunks", "message"),
    [
        ("dualpipe", 3, 12, None, "even"),
        ("dualpipe", 4, 6, None, "at least 2 x pp"),
        ("dualpipe", 4, 9, None, "even"),
        ("dualpipev", 4, 7, None, "at least 2 x pp"),
        ("interleaved-1f1b", 4, 9, 2, "multiple of the rounds"),
        ("1f1b", 0, 4, None, "--pp"),
        ("zbv", 4, 8, 3, "--chunks 3"),
        ("1f1b", 4, 0, None, "--microbatches"),
    ],
)
def test_bad_sizes_are_user_errors(
    name: str, pp: int, microbatches: int, chunks: int | None, message: str
) -> None:
    with pytest.raises(ScheduleError, match=re.escape(message)):
        generate(name, pp, microbatches, chunks)
