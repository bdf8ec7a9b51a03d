"""The HTML page: self-contained, no network, and untrusted text cannot escape its place."""

from __future__ import annotations

import json
import re

import altair as alt
import pytest
import vl_convert

from dashboards.page import (
    CONTENT_SECURITY_POLICY,
    VEGA_LITE_VERSION,
    Page,
    Section,
    View,
    render_html,
    script_json,
)


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


def test_page_needs_nothing_from_the_network(hostile: str) -> None:
    page = without_library(render_html(hostile_page(hostile)))

    assert f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">' in page
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=|<link\b", page, re.IGNORECASE)
    assert "vegaEmbed(element, spec, options)" in page


def test_a_section_without_a_chart_must_say_why() -> None:
    with pytest.raises(AssertionError, match="neither a chart nor a note"):
        Section("empty", "Empty")
