"""The shipped Grafana board: every panel's query names a metric that ``record --live`` really serves."""

from __future__ import annotations

import re
import socket
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from live_runs import job, record_live, wait_for
from prometheus_client.parser import text_string_to_metric_families

import dashboards
from tracekit.live.metrics import LiveMetrics

BOARD = Path(dashboards.__file__).parent / "grafana" / "tracekit-live.json"
_METRIC = re.compile(r"\btracekit_[a-z_]+\b")


def board() -> dict[str, Any]:
    return orjson.loads(BOARD.read_bytes())


def queries(document: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the board: panel targets and template variables."""
    found = [target["expr"] for panel in document["panels"] for target in panel["targets"]]
    found += [
        variable["query"]["query"]
        for variable in document["templating"]["list"]
        if variable["type"] == "query"
    ]
    return found


def queried_metrics(document: dict[str, Any]) -> set[str]:
    names = set()
    for expr in queries(document):
        in_expr = _METRIC.findall(expr)
        assert in_expr, f"query names no tracekit metric: {expr}"
        names.update(in_expr)
    return names


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_board_is_importable_as_is() -> None:
    document = board()

    assert document["__inputs"][0]["pluginId"] == "prometheus"
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))
    for panel in document["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        assert panel["targets"] and {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        assert all(target["datasource"]["uid"] == "${DS_PROMETHEUS}" for target in panel["targets"])


def test_every_metric_the_exporter_registers_has_a_panel() -> None:
    metrics = LiveMetrics(_free_port(), address="127.0.0.1")
    try:
        served = {
            sample_name
            for family in metrics.registry.collect()
            for sample_name in ([f"{family.name}_total"] if family.type == "counter" else [family.name])
        }
    finally:
        metrics.close()

    assert served == queried_metrics(board())


@pytest.mark.slow
def test_every_query_names_a_metric_a_real_live_session_serves(tmp_path: Path) -> None:
    port = _free_port()
    scraped: list[str] = []

    def scrape(out_dir: Path) -> None:
        wait_for(out_dir, "alert")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            scraped.append(response.read().decode())

    command = job("--slow-rank", "2", "--slow-ms", "20", "--slow-from-step", "3", steps=24)
    run = record_live(
        tmp_path,
        command,
        "--live-interval",
        "4",
        "--live-capture-steps",
        "0",
        "--prometheus-port",
        str(port),
        during=scrape,
    )

    assert run.exit_code == 0, run.stderr[-3000:]
    served = {
        sample.name for family in text_string_to_metric_families(scraped[0]) for sample in family.samples
    }
    missing = queried_metrics(board()) - served
    assert not missing, f"queried but not served: {missing}"
