"""One self-contained HTML page of chart sections: vega, vega-lite and vega-embed inlined, no network.

The JavaScript is vl-convert's bundle (``vl_convert.javascript_bundle``) for the vega-lite version
altair writes, inlined once. Each chart's vega-lite spec sits in its own
``<script type="application/json">`` block and a short script embeds them all. A
Content-Security-Policy meta tag forbids every fetch, so the page works air-gapped and cannot
phone home even if a spec asked it to.

Trace text (kernel names, labels, paths) is untrusted. In the JSON blocks every ``<``, ``>``,
``&``, U+2028 and U+2029 is written as a ``\\uXXXX`` escape, so no string can close the
``<script>`` element or open a comment; the page's own text goes through ``html.escape``;
vega-embed's tooltips escape HTML (vega-tooltip's default ``sanitize``); nothing is assigned to
``innerHTML``. The views put trace text in data values only, never in a spec's structure (sort
lists, scale domains, titles): vega-lite compiles some of those into expressions.

Not for: building charts (the view modules) or writing images (``export``).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import orjson
import vl_convert

VEGA_LITE_VERSION = ".".join(alt.SCHEMA_VERSION.removeprefix("v").split(".")[:2])
"""The vega-lite version altair's specs are written for (``6.4``); the inlined library matches it."""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:"
)
"""No fetch, image or font from anywhere but the page itself. vega compiles its expressions with
``Function``, hence ``'unsafe-eval'``."""

EMBED_OPTIONS: dict[str, Any] = {
    "actions": {"export": True, "source": False, "compiled": False, "editor": False}
}
"""vega-embed's menu offers PNG/SVG export only: its editor links would leave the page."""

_KEY = re.compile(r"^[a-z][a-z0-9-]*$")
_JSON_ESCAPES = {
    b"<": b"\\u003c",
    b">": b"\\u003e",
    b"&": b"\\u0026",
    "\u2028".encode(): b"\\u2028",
    "\u2029".encode(): b"\\u2029",
}


@dataclass(frozen=True)
class View:
    """One chart of a section: its vega-lite spec, and the renderer for it."""

    key: str
    """Identifier in the page and file stem of its image (lowercase letters, digits, dashes)."""
    spec: dict[str, Any]
    """The vega-lite spec, data inlined."""
    renderer: str = "svg"
    """``svg``, or ``canvas`` for charts with many marks."""

    def __post_init__(self) -> None:
        assert _KEY.match(self.key), self.key
        assert self.renderer in ("svg", "canvas"), self.renderer

    @classmethod
    def of(cls, key: str, chart: alt.TopLevelMixin, renderer: str = "svg") -> View:
        """A view of an altair chart, converted once and its structure validated against the vega-lite schema.

        The validation sees one row of each dataset: checking tens of thousands of plain rows costs
        seconds and finds nothing (any JSON object is a valid row).
        """
        spec = chart.to_dict(validate=False)
        datasets = spec.get("datasets", {})
        type(chart).validate({**spec, "datasets": {name: rows[:1] for name, rows in datasets.items()}})
        return cls(key, spec, renderer)


@dataclass(frozen=True)
class Section:
    """A titled part of the page: its charts, and notes (an omitted analysis says why here)."""

    key: str
    title: str
    views: tuple[View, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        assert _KEY.match(self.key), self.key
        assert self.views or self.notes, f"section {self.key} has neither a chart nor a note saying why"


@dataclass(frozen=True)
class Page:
    """The whole report: a title, facts about the run, warnings, and the sections in order."""

    title: str
    facts: tuple[tuple[str, str], ...] = ()
    """(name, value) lines under the title."""
    warnings: tuple[str, ...] = ()
    sections: tuple[Section, ...] = field(default=())
    headline: tuple[str, ...] = ()
    """The answer, in sentences, shown above everything else (``dashboards.headline``)."""

    @property
    def views(self) -> tuple[View, ...]:
        """Every chart of the page, in order."""
        return tuple(view for section in self.sections for view in section.views)


def script_json(value: Any) -> str:
    """JSON safe to inline in a ``<script>`` element whatever strings it holds."""
    data = orjson.dumps(value)
    for raw, escaped in _JSON_ESCAPES.items():
        data = data.replace(raw, escaped)
    return data.decode()


def _bundle() -> str:
    bundle = vl_convert.javascript_bundle(vl_version=VEGA_LITE_VERSION)
    assert "</script" not in bundle.lower(), "the inlined bundle would close its own <script> element"
    return bundle


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1200px;
       padding: 0 16px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; font-size: 14px; }
dl.facts dt { color: #666; }
dl.facts dd { margin: 0; }
ul.warnings li { color: #8a4b00; font-size: 14px; }
p.note { background: #f4f4f4; border-left: 4px solid #999; padding: 6px 10px; font-size: 14px; }
nav a { margin-right: 14px; font-size: 14px; }
section.headline { background: #fff4e5; border-left: 6px solid #d95f02; padding: 8px 16px; margin: 16px 0; }
section.headline p { font-size: 17px; margin: 6px 0; }
.view { margin: 12px 0; overflow-x: auto; }
"""

_BOOT = """
for (const element of document.querySelectorAll("div.view[data-spec]")) {
  const spec = JSON.parse(document.getElementById(element.dataset.spec).textContent);
  const options = Object.assign({renderer: element.dataset.renderer}, EMBED_OPTIONS);
  vegaEmbed(element, spec, options)
    .then(() => { element.dataset.rendered = "ok"; })
    .catch((error) => {
      element.dataset.rendered = "error";
      element.textContent = "This chart failed to render: " + error;
      console.error(error);
    });
}
"""


def _section_html(section: Section) -> str:
    parts = [f'<section id="{section.key}"><h2>{html.escape(section.title)}</h2>']
    parts += [f'<p class="note">{html.escape(note)}</p>' for note in section.notes]
    for view in section.views:
        parts.append(
            f'<div class="view" id="view-{view.key}" data-spec="spec-{view.key}" '
            f'data-renderer="{view.renderer}"></div>'
            f'<script type="application/json" id="spec-{view.key}">{script_json(view.spec)}</script>'
        )
    parts.append("</section>")
    return "\n".join(parts)


def render_html(page: Page) -> str:
    """The page as one HTML document that needs nothing but a browser."""
    for keys in ([view.key for view in page.views], [section.key for section in page.sections]):
        assert len(keys) == len(set(keys)), f"duplicate keys in the page: {keys}"
    facts = "".join(
        f"<dt>{html.escape(name)}</dt><dd>{html.escape(value)}</dd>" for name, value in page.facts
    )
    warnings = "".join(f"<li>{html.escape(warning)}</li>" for warning in page.warnings)
    # Navigation leads only to sections with a chart: one that holds just a note saying why is not a place to go.
    nav = "".join(f'<a href="#{s.key}">{html.escape(s.title)}</a>' for s in page.sections if s.views)
    headline = "".join(f"<p>{html.escape(line)}</p>" for line in page.headline)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(page.title)}</title>",
            f"<style>{_STYLE}</style>",
            f"<script>{_bundle()}</script>",
            "</head><body>",
            f"<h1>{html.escape(page.title)}</h1>",
            f'<dl class="facts">{facts}</dl>' if facts else "",
            f'<section class="headline" id="answer">{headline}</section>' if headline else "",
            f'<ul class="warnings">{warnings}</ul>' if warnings else "",
            f"<nav>{nav}</nav>",
            *(_section_html(section) for section in page.sections),
            f"<script>const EMBED_OPTIONS = {script_json(EMBED_OPTIONS)};\n{_BOOT}</script>",
            "</body></html>",
        ]
    )
