"""The derived cache: entries read back exactly, keyed by everything that shapes them, never trusted when damaged."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.perrank.cache import derived_key, frame_digest, read_entry, write_entry

SCHEMA = {"rank": pl.Int32(), "start_ns": pl.Int64(), "kind": pl.String()}


def _frame() -> pl.DataFrame:
    return pl.DataFrame(
        {"rank": [0, 0, 1], "start_ns": [5, 9, None], "kind": ["F", None, "B"]}, schema=SCHEMA
    )


def test_an_entry_reads_back_its_frames_and_facts(tmp_path: Path) -> None:
    write_entry(tmp_path, "k", {"actions": _frame()}, {"outside": 2, "warnings": ["w"]})

    found = read_entry(tmp_path, "k", {"actions": SCHEMA})

    assert found is not None
    assert found[0]["actions"].equals(_frame()) and found[1] == {"outside": 2, "warnings": ["w"]}


@pytest.mark.parametrize("damage", ["no record", "no table", "truncated", "swapped", "bad json", "other key"])
def test_a_damaged_entry_is_absent(tmp_path: Path, damage: str) -> None:
    write_entry(tmp_path, "k", {"actions": _frame()}, {})
    write_entry(tmp_path, "j", {"actions": _frame().head(1)}, {})
    record, table = tmp_path / "k.derived.json", tmp_path / "k.actions.parquet"
    if damage == "no record":
        record.unlink()
    elif damage == "no table":
        table.unlink()
    elif damage == "truncated":
        table.write_bytes(table.read_bytes()[:-20])
    elif damage == "swapped":
        table.write_bytes((tmp_path / "j.actions.parquet").read_bytes())
    elif damage == "bad json":
        record.write_text('{"format": ')
    else:
        record.write_bytes((tmp_path / "j.derived.json").read_bytes())

    assert read_entry(tmp_path, "k", {"actions": SCHEMA}) is None


def test_a_table_in_another_schema_is_absent(tmp_path: Path) -> None:
    write_entry(tmp_path, "k", {"actions": _frame()}, {})

    assert read_entry(tmp_path, "k", {"actions": {**SCHEMA, "rank": pl.Int64()}}) is None


def test_keys_follow_the_trace_the_kind_and_every_input() -> None:
    table = Path("/cache/rank0.json.gz.100-7-v3.parquet")
    key = derived_key(table, "rank", (0, 1, None))

    assert key.startswith("rank0.json.gz.100-7-v3.rank-")
    assert key == derived_key(table, "rank", (0, 1, None))
    assert (
        len({key, derived_key(table, "rank", (0, 2, None)), derived_key(table, "figures", (0, 1, None))}) == 3
    )
    assert derived_key(Path("/cache/rank0.json.gz.100-8-v3.parquet"), "rank", (0, 1, None)) != key


def test_frame_digests_differ_by_rows_and_by_schema() -> None:
    frame = _frame()

    assert frame_digest(frame) == frame_digest(_frame())
    assert frame_digest(frame) != frame_digest(frame.head(2))
    assert frame_digest(frame) != frame_digest(frame.cast({"rank": pl.Int64()}))
