"""The HTML page: self-contained, no network, and untrusted text cannot escape its place."""

from __future__ import annotations

import json
import re
from pathlib import Path

import altair as alt
import pytest
import vl_convert

from dashboards.build import build_page
from dashboards.page import (
    VEGA_LITE_VERSION,
    Page,
    Section,
    View,
    render_html,
    script_json,
)
from tracekit.run_analysis import analyse


@pytest.mark.parametrize(
    "text",
    ["</script><script>alert(1)</script>", "<!-- ", "a & b > c", "line\u2028separator\u2029", "</SCRIPT >"],
)
def test_script_json_round_trips_without_characters_that_end_a_script(text: str) -> None:
    encoded = script_json({"name": text, "nested": [text]})

    assert not set(encoded) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(encoded) == {"name": text, "nested": [text]}


def hostile_page(hostile: str) -> Page:
    chart = alt.Chart({"values": [{"name": hostile, "value": 1}]}).mark_bar().encode(x="value:Q", y="name:N")
    return Page(
        title=hostile,
        facts=(("run", hostile),),
        warnings=(hostile,),
        sections=(Section("hostile", hostile, views=(View.of("hostile", chart),), notes=(hostile,)),),
    )


def without_library(page: str) -> str:
    """The page minus the inlined vega bundle (whose code holds markup in strings of its own)."""
    bundle = vl_convert.javascript_bundle(vl_version=VEGA_LITE_VERSION)
    assert page.count(bundle) == 1
    return page.replace(bundle, "")


def test_hostile_text_stays_text(hostile: str) -> None:
    page = without_library(render_html(hostile_page(hostile)))

    # The only script elements are the page's own three: the bundle, one spec, the embedding code.
    assert len(re.findall(r"<script", page, re.IGNORECASE)) == 3
    assert len(re.findall(r"</script", page, re.IGNORECASE)) == 3
    assert "<!--" not in page and "<img" not in page
    # Escaped where shown: title, heading, fact, warning, navigation link, section heading, note.
    assert page.count("&lt;/script&gt;&lt;script&gt;window.__pwned=1") == 7


def _policy(page: str) -> dict[str, list[str]]:
    """The Content-Security-Policy the page declares, directive -> sources, read from the page itself."""
    match = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert match is not None, "the page declares no Content-Security-Policy"
    directives = [part.split() for part in match.group(1).split(";") if part.strip()]
    return {name: sources for name, *sources in directives}


def _urls(value: object) -> list[str]:
    """Every ``url`` a Vega-Lite spec would fetch (data sources, images), wherever it sits."""
    if isinstance(value, dict):
        found = [value["url"]] if isinstance(value.get("url"), str) else []
        return found + [url for item in value.values() for url in _urls(item)]
    if isinstance(value, list):
        return [url for item in value for url in _urls(item)]
    return []


def test_page_needs_nothing_from_the_network(hostile: str) -> None:
    page = without_library(render_html(hostile_page(hostile)))

    policy = _policy(page)
    assert policy["default-src"] == ["'none'"]
    # Nothing may widen the default to the network: no directive names a host, a network scheme,
    # a wildcard or the page's own origin (inline data: and blob: images stay in the page).
    for name, sources in policy.items():
        assert all(source.startswith("'") or source in ("data:", "blob:") for source in sources), (name, sources)
        assert "'self'" not in sources and "connect-src" not in policy, (name, sources)
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=|<link\b", page, re.IGNORECASE)


def test_every_chart_of_a_real_run_embeds_its_data() -> None:
    page = build_page(analyse(Path(__file__).resolve().parents[2] / "sample_traces" / "dualpipev-straggler"))

    assert page.views
    for view in page.views:
        assert _urls(view.spec) == [], view.key
        assert all(rows for rows in view.spec.get("datasets", {}).values()), view.key


def test_a_section_without_a_chart_must_say_why() -> None:
    with pytest.raises(AssertionError, match="neither a chart nor a note"):
        Section("empty", "Empty")
