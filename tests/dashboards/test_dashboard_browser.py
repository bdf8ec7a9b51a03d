"""The page in a real headless Chromium with the network off: every view draws, nothing errs, nothing runs.

Needs Debian's ``chromium`` and ``chromium-driver`` and selenium from PyPI. Skipped with the reason
when they are absent on a developer machine; a failure under CI (``CI=true``), which installs them.
Screenshots go to ``artifacts/`` (gitignored) for people to look at.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from dashboards.build import (
    DashboardConfig,
    build_page,
    overlap_section,
    sections_from_actions,
    straggler_section,
)
from dashboards.page import Page, render_html
from tracekit.run_analysis import RunAnalysis
from tracekit.trace.run import load_run

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "artifacts"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # The network is off: every request goes to a proxy on a closed port; file:// needs none.
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--window-size=1300,900",
)

VIEW_STATE = """
return [...document.querySelectorAll("div.view[data-spec]")].map((element) => {
  const svg = element.querySelector("svg.marks");
  const canvas = element.querySelector("canvas.marks");
  let painted = 0;
  if (canvas && canvas.width && canvas.height) {
    const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 3; i < pixels.length; i += 4 * 7) painted += pixels[i] > 0 ? 1 : 0;
  }
  return {
    id: element.id,
    rendered: element.dataset.rendered,
    svg_marks: svg ? svg.querySelectorAll('g[class*="role-mark"] > *').length : 0,
    canvas_painted: painted,
  };
});
"""


def _missing() -> list[str]:
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install selenium)")
    return missing


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A headless Chromium with the network off, driven by chromedriver."""
    missing = _missing()
    if missing:
        reason = f"browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium")  # type: ignore[assignment]
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def open_page(driver, path: Path, screenshot: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """Load ``path``, wait until every view has settled, save a full-page screenshot; the views' states."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(path.as_uri())
    WebDriverWait(driver, 60).until(
        lambda d: d.execute_script(
            'return [...document.querySelectorAll("div.view[data-spec]")].every((e) => e.dataset.rendered)'
        )
    )
    views = driver.execute_script(VIEW_STATE)
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 16000), "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / screenshot).write_bytes(base64.b64decode(shot["data"]))
    return views


def hover_tooltip(driver, selector: str) -> dict:  # type: ignore[no-untyped-def]
    """Hover the first element matching ``selector``; the tooltip's text and how many img/script it holds."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    ActionChains(driver).move_to_element(driver.find_element(By.CSS_SELECTOR, selector)).perform()
    WebDriverWait(driver, 10).until(
        lambda d: d.execute_script(
            'const tip = document.getElementById("vg-tooltip-element");'
            'return tip && tip.classList.contains("visible")'
        )
    )
    return driver.execute_script(
        'const tip = document.getElementById("vg-tooltip-element");'
        'return {text: tip.textContent, elements: tip.querySelectorAll("img, script").length};'
    )


def console_messages(driver) -> list[dict]:  # type: ignore[no-untyped-def]
    """Console errors and warnings the page logged (vega reports bad specs as warnings)."""
    return [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]


def test_sample_run_renders_every_view_and_hostile_names_stay_text(
    browser, tmp_path: Path, hostile: str
) -> None:
    page = build_page(RunAnalysis.of_run(load_run(REPO_ROOT / "sample_traces" / "dualpipev-straggler")))
    overlap = pl.DataFrame(
        {"rank": [0, 1], "comm_class": [hostile, "p2p"], "comm_ms": [2.0, 3.0], "overlapped_ms": [1.0, 0.5]},
        schema={
            "rank": pl.Int32(),
            "comm_class": pl.String(),
            "comm_ms": pl.Float64(),
            "overlapped_ms": pl.Float64(),
        },
    )
    sections = tuple(overlap_section(overlap, None) if s.key == "overlap" else s for s in page.sections)
    path = tmp_path / "report.html"
    path.write_text(render_html(Page(hostile, page.facts, (hostile,), sections)), encoding="utf-8")

    views = open_page(browser, path, "dashboard-sample.png")

    assert [view["id"] for view in views] == [
        "view-timeline",
        "view-utilization",
        "view-overlap",
        "view-stragglers",
        "view-whatif",
        "view-comparison",
    ]
    assert all(view["rendered"] == "ok" and view["svg_marks"] > 0 for view in views), views
    assert console_messages(browser) == []
    assert browser.execute_script("return document.querySelector('h1').textContent") == hostile
    tooltip = hover_tooltip(browser, "#view-overlap svg.marks g.mark-rect path")  # rank 0, the hostile class
    assert "window.__pwned=1" in tooltip["text"] and tooltip["elements"] == 0
    assert browser.execute_script("return window.__pwned === undefined && !document.querySelector('img')")


def test_2048_ranks_render_on_canvas(browser, tmp_path: Path, simulated_run) -> None:
    actions = simulated_run("1f1b", pp=8, microbatches=16, replicas=256, slow_rank=1234, factor=1.5)
    scores = (
        actions.group_by("rank", "kind")
        .agg((pl.col("end_ns") - pl.col("start_ns")).median().cast(pl.Float64()).alias("median_ms") / 1e6)
        .with_columns(
            pl.col("median_ms").median().over("kind").alias("reference_ms"),
            pl.lit("none").alias("pattern"),
            pl.lit("peers").alias("reference"),
        )
        .with_columns(
            (pl.col("reference_ms") / pl.col("median_ms")).alias("score"),
            ((pl.col("rank") == 1234) & (pl.col("kind") == "F")).alias("flagged"),
        )
    )
    sections = sections_from_actions(actions, None, DashboardConfig()) + (
        straggler_section(scores, None, None, 0.75),
    )
    path = tmp_path / "report.html"
    path.write_text(render_html(Page("2048 ranks", sections=sections)), encoding="utf-8")

    views = open_page(browser, path, "dashboard-2048-ranks.png")

    by_id = {view["id"]: view for view in views}
    assert by_id["view-timeline"]["rendered"] == "ok" and by_id["view-timeline"]["canvas_painted"] > 1000
    assert all(
        view["rendered"] == "ok" and view["svg_marks"] > 0
        for key, view in by_id.items()
        if key != "view-timeline"
    )
    assert console_messages(browser) == []


PICK_RANK = """
const input = document.querySelector('#view-rank-any input[type="number"]');
input.value = arguments[0];
input.dispatchEvent(new Event("input", {bubbles: true}));
"""

RANK_SHOWN = """
const view = document.querySelector('#view-rank-any svg.marks');
const axis = view.querySelector('g[aria-label^="Y-axis"]');
return {axis: axis ? axis.getAttribute("aria-label") : "", bars: view.querySelectorAll('g[class*="role-mark"] > path').length};
"""
"""The any-rank view's rank axis (vega names its one value) and how many bars it draws."""


def test_a_2048_rank_real_capture_page_renders_and_opens_any_rank(
    browser, tmp_path: Path, replicated_capture
) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    analysis = replicated_capture("1f1b", 512)
    path = tmp_path / "report.html"
    path.write_text(render_html(build_page(analysis)), encoding="utf-8")

    views = open_page(browser, path, "dashboard-2048-real.png")

    assert path.stat().st_size < 10e6
    by_id = {view["id"]: view for view in views}
    assert {
        "view-rank-steps",
        "view-rank-bubbles",
        "view-rank-costliest",
        "view-rank-any",
        "view-critical-path",
    } <= set(by_id)
    assert all(view["rendered"] == "ok" for view in views), views
    assert all(view["svg_marks"] > 0 or view["canvas_painted"] > 0 for view in views), views
    assert console_messages(browser) == []
    step = int(analysis.actions["step"].min())  # type: ignore[arg-type]
    for rank in (1234, 2047):
        bars = analysis.actions.filter((pl.col("step") == step) & (pl.col("rank") == rank)).height
        browser.execute_script(PICK_RANK, rank)
        shown = f"1 value: {rank}"
        WebDriverWait(browser, 20).until(
            lambda d, shown=shown: d.execute_script(RANK_SHOWN)["axis"].endswith(shown)
        )
        assert browser.execute_script(RANK_SHOWN)["bars"] == bars


def test_the_page_opens_with_the_answer_and_navigates_only_to_drawn_sections(browser, tmp_path: Path) -> None:
    analysis = RunAnalysis.of_run(load_run(REPO_ROOT / "sample_traces" / "dualpipev-straggler"))
    priced = analysis.stragglers.flagged.row(0, named=True)
    path = tmp_path / "report.html"
    path.write_text(render_html(build_page(analysis)), encoding="utf-8")

    open_page(browser, path, "dashboard-headline.png")

    answer = browser.execute_script("return document.getElementById('answer').innerText")
    assert answer.startswith(f"Rank {priced['rank']} is the straggler")
    assert f"it costs {priced['saving_ms']:.0f} ms, {priced['saving_ms'] / priced['step_ms']:.0%} of the step" in answer
    above = browser.execute_script(
        "return document.getElementById('answer').getBoundingClientRect().bottom"
        " <= document.querySelector('section[id]:not(#answer)').getBoundingClientRect().top"
    )
    assert above  # the answer comes before every chart
    links = browser.execute_script("return [...document.querySelectorAll('nav a')].map((a) => a.hash.slice(1))")
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('section[id]')].filter((s) => s.querySelector('div.view'))"
        ".map((s) => s.id)"
    )
    assert links == drawn and "overlap" not in links  # no GPU events: the overlap section is only a note
