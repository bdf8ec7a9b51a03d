"""Writing a run's dashboard: the HTML page, and each chart as PNG / SVG when asked.

Not for: building the page (``dashboards.build``) or rendering charts (``dashboards.export``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dashboards.build import DashboardConfig, build_page
from dashboards.export import write_images
from dashboards.page import render_html
from tracekit.run_analysis import RunAnalysis


@dataclass(frozen=True)
class Written:
    """What ``write_dashboard`` wrote."""

    html: Path
    size_bytes: int
    charts: tuple[str, ...]
    """Keys of the charts on the page."""
    omitted: dict[str, str]
    """Section key -> why it has no chart."""
    images: tuple[Path, ...]
    warnings: tuple[str, ...]

    def payload(self) -> dict[str, Any]:
        """The JSON payload of ``tracekit dashboard``."""
        return {
            "out": str(self.html),
            "bytes": self.size_bytes,
            "charts": list(self.charts),
            "omitted": self.omitted,
            "images": [str(path) for path in self.images],
        }

    def summary(self) -> pl.DataFrame:
        """One row for people: where the page is, how big, what it holds."""
        return pl.DataFrame(
            {
                "out": [str(self.html)],
                "MB": [self.size_bytes / 1e6],
                "charts": [", ".join(self.charts)],
                "omitted": [", ".join(self.omitted) or "-"],
                "images": [len(self.images)],
            }
        )


def write_dashboard(
    analysis: RunAnalysis,
    out: Path,
    config: DashboardConfig | None = None,
    png_dir: Path | None = None,
    svg_dir: Path | None = None,
    baseline: RunAnalysis | None = None,
) -> Written:
    """Build the page of ``analysis`` (against ``baseline`` when given), write it to ``out``, and each chart as
    PNG / SVG when asked."""
    page = build_page(analysis, config, baseline)
    text = render_html(page)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    images: list[Path] = []
    for directory, fmt in ((png_dir, "png"), (svg_dir, "svg")):
        if directory is not None:
            images += write_images(page, directory, (fmt,))
    return Written(
        html=out,
        size_bytes=out.stat().st_size,
        charts=tuple(view.key for view in page.views),
        omitted={section.key: " ".join(section.notes) for section in page.sections if not section.views},
        images=tuple(images),
        warnings=page.warnings,
    )
