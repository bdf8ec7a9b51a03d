"""One label grammar: the trace's label formats read exactly what ``Action``/``OverlappedPair`` parse."""

from __future__ import annotations

import re

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.labels import KINDS, action_label, pair_label
from collectors.patch_torch import _PP_PAIR
from tracekit.schedule.action import KIND_CODES, Action, OverlappedPair, parse_step
from tracekit.trace.labels import match_labels

_numbers = st.integers(0, 10_000)
_texts = st.text(alphabet="0123456789FBIWX;()_OVERLAPPtrackeit:", max_size=30)


def _matched(name: str) -> dict | None:
    spans = pl.DataFrame({"name": [name]})
    rows = match_labels(spans).filter(pl.col("role").is_in(["action", "pair"]))
    return rows.row(0, named=True) if rows.height else None


@settings(max_examples=300, deadline=None)
@given(_numbers, st.sampled_from(KIND_CODES), _numbers)
def test_an_action_label_reads_as_the_action_it_prints(stage: int, kind: str, microbatch: int) -> None:
    action = Action.parse(f"{stage}{kind}{microbatch}")

    row = _matched(action_label(stage, kind, microbatch))

    assert row is not None and (row["stage"], row["kind"], row["microbatch"]) == (stage, kind, microbatch)
    assert str(action) == f"{stage}{kind}{microbatch}"


@settings(max_examples=300, deadline=None)
@given(_numbers, _numbers, _numbers, st.sampled_from("BI"), _numbers)
def test_a_pair_label_reads_as_the_pair_it_prints(fs: int, fm: int, bs: int, bk: str, bm: int) -> None:
    pair = OverlappedPair.parse(f"({fs}F{fm};{bs}{bk}{bm})OVERLAP_F_B")

    row = _matched(pair_label((fs, fm), (bs, bk, bm)))

    assert row is not None and row["pair"] == f"{pair.forward};{pair.backward}"
    assert _PP_PAIR.match(f"PP:{pair}") is not None  # what torch labels, the collector re-labels


@settings(max_examples=500, deadline=None)
@given(_texts)
def test_the_formats_accept_what_the_parsers_accept_and_nothing_else(text: str) -> None:
    try:
        step = parse_step(text)
    except ValueError:
        step = None

    for prefix in ("tracekit:", "PP:"):
        row = _matched(prefix + text)
        assert (row is not None) == (step is not None), (prefix, text)
        collector = _PP_PAIR.match(prefix + text)
        if collector is not None:
            assert isinstance(step, OverlappedPair)


def test_the_collectors_kinds_are_the_grammars() -> None:
    assert tuple(KINDS) == KIND_CODES
    assert re.fullmatch(r"\d+[FBIW]\d+", str(Action.parse("12W3")))
