"""A report's stored result: printed again only while nothing it depends on changed.

The commands run as a user runs them (a child process); the key's parts are checked one by one
on ``ResultStore.of``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.cli import result_store
from tracekit.cli.result_store import KEPT_PER_COMMAND, ResultStore
from tracekit.present.printed import Printed, PrintedColumn, PrintedTable
from tracekit.trace.cache_dir import CACHE_DIR_NAME

FORMATS = ((), ("--format", "json"), ("--format", "csv"), ("--wide",), ("--explain",))


def tracekit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _stored(root: Path) -> list[Path]:
    return sorted((root / CACHE_DIR_NAME).glob("report.result-*.json"))


def test_a_repeated_report_prints_what_the_first_printed_in_every_format(two_rank_run: Path) -> None:
    first = {args: tracekit("report", str(two_rank_run), *args) for args in FORMATS}
    assert len(_stored(two_rank_run)) == 1
    again = {args: tracekit("report", str(two_rank_run), *args) for args in FORMATS}

    for args in FORMATS:
        assert first[args].returncode == again[args].returncode == 0, (args, again[args].stderr)
        assert again[args].stdout == first[args].stdout, args
        assert again[args].stderr == first[args].stderr, args


def test_a_changed_or_removed_trace_is_analysed_again(two_rank_run: Path) -> None:
    before = tracekit("report", str(two_rank_run), "--format", "json")
    (two_rank_run / "rank1.json.gz").unlink()

    after = tracekit("report", str(two_rank_run), "--format", "json")

    assert before.returncode == after.returncode == 0, after.stderr
    assert '"partial": false' in before.stdout and '"partial": true' in after.stdout
    assert len(_stored(two_rank_run)) == 2


def test_another_option_is_another_result(two_rank_run: Path) -> None:
    plain = tracekit("report", str(two_rank_run), "--format", "json")
    layout = tracekit("report", str(two_rank_run), "--format", "json", "--pipelines", "contiguous:1")

    assert plain.returncode == layout.returncode == 0, layout.stderr
    assert plain.stdout != layout.stdout
    assert len(_stored(two_rank_run)) == 2


def test_a_damaged_stored_result_is_computed_again(two_rank_run: Path) -> None:
    first = tracekit("report", str(two_rank_run), "--format", "json")
    (stored,) = _stored(two_rank_run)
    stored.write_bytes(stored.read_bytes()[:100])

    again = tracekit("report", str(two_rank_run), "--format", "json")

    assert again.returncode == 0 and again.stdout == first.stdout, again.stderr
    assert again.stderr == first.stderr
    assert Printed.from_bytes(stored.read_bytes()).json.decode() + "\n" == first.stdout


def test_out_always_computes_and_writes_its_files(two_rank_run: Path, tmp_path: Path) -> None:
    tracekit("report", str(two_rank_run))
    out = tmp_path / "out"

    done = tracekit("report", str(two_rank_run), "--out", str(out))

    assert done.returncode == 0, done.stderr
    assert (out / "result.json").is_file() and (out / "ranks.parquet").is_file()


def test_a_store_that_cannot_be_written_costs_nothing(tmp_path: Path) -> None:
    printed = Printed(json=b"{}")
    store = ResultStore(tmp_path / "no such folder", "report", "0" * 32)

    store.write(printed)

    assert store.read() is None and not (tmp_path / "no such folder").exists()


def test_an_interrupted_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(result_store.os, "replace", interrupted)

    with pytest.raises(KeyboardInterrupt):
        ResultStore(tmp_path, "report", "0" * 32).write(Printed(json=b"{}"))
    assert list(tmp_path.iterdir()) == []


def test_a_mistyped_run_has_no_store_and_leaves_no_cache_folder(tmp_path: Path) -> None:
    assert ResultStore.of("report", tmp_path / "absent", {}) is None
    assert not (tmp_path / CACHE_DIR_NAME).exists()


def test_only_the_newest_results_of_a_command_are_kept(tmp_path: Path) -> None:
    printed = Printed(json=b"{}")
    for index in range(KEPT_PER_COMMAND + 3):
        ResultStore(tmp_path, "report", f"{index:032d}").write(printed)
        os.utime(tmp_path / f"report.result-{index:032d}.json", ns=(index * 10**9, index * 10**9))
    ResultStore(tmp_path, "whatif", "f" * 32).write(printed)

    kept = sorted(path.name for path in tmp_path.glob("report.result-*.json"))
    assert kept == [f"report.result-{index:032d}.json" for index in range(3, KEPT_PER_COMMAND + 3)]
    assert (tmp_path / f"whatif.result-{'f' * 32}.json").exists()


def _key(root: Path, **options: object) -> str:
    store = ResultStore.of("report", root, options)
    assert store is not None
    return store.key


def test_the_key_holds_every_file_beside_the_traces(two_rank_run: Path) -> None:
    before = _key(two_rank_run)
    assert _key(two_rank_run) == before
    manifest = two_rank_run / "run.json"
    manifest.write_text("{}")
    with_manifest = _key(two_rank_run)
    os.utime(manifest, ns=(1, 1))

    assert len({before, with_manifest, _key(two_rank_run)}) == 3


def test_the_key_holds_the_options_and_the_files_they_name(two_rank_run: Path, tmp_path: Path) -> None:
    patterns = tmp_path / "classes.toml"
    patterns.write_text("[[pattern]]\n")
    named = _key(two_rank_run, kernel_classes=patterns)
    patterns.write_text("[[pattern]]\n\n")

    run = two_rank_run
    keys = {_key(run), _key(run, threshold=0.2), named, _key(run, kernel_classes=patterns)}

    assert len(keys) == 4


def test_the_key_holds_tracekit_environment_variables(
    two_rank_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _key(two_rank_run)
    monkeypatch.setenv("TRACEKIT_MAX_TRACE_MB", "64")
    limited = _key(two_rank_run)
    monkeypatch.setenv("UNRELATED_SETTING", "1")

    assert before != limited and _key(two_rank_run) == limited


def test_the_key_holds_tracekit_source(two_rank_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _key(two_rank_run)
    sources = list(result_store._source_files())
    assert any(path.endswith(os.path.join("present", "report.py")) for path, _, _ in sources)
    edited = [(path, size + path.endswith("report.py"), mtime) for path, size, mtime in sources]
    monkeypatch.setattr(result_store, "_source_files", lambda: iter(edited))

    assert _key(two_rank_run) != before


def test_printed_results_survive_storing_with_any_text() -> None:
    text = "tab\tbell\x07 escape\x1b[31m red, 中文, \u202e, quote \" and \\"
    printed = Printed(
        json=b'{"a": "\\u001b"}',
        tables=(
            PrintedTable(
                title=text,
                notes=(text, ""),
                columns=(
                    PrintedColumn("rank", "rank", True, ("0", "1")),
                    PrintedColumn("name", text, False, (text, "-")),
                ),
                default=("name",),
                csv="rank,name\n0,x\n",
            ),
        ),
        warnings=(text,),
        headline=(text,),
        definitions=(),
    )

    assert Printed.from_bytes(printed.to_bytes()) == printed


@pytest.mark.parametrize("damage", [b"", b"{}", b'{"format": "tracekit-printed/0"}', b"[1, 2]", b"\xff"])
def test_what_is_not_a_stored_result_is_refused(damage: bytes) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        Printed.from_bytes(damage)
