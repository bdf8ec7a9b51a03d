"""Each chart of a page as a PNG or SVG file, rendered by vl-convert (no browser needed).

Not for: the HTML page (``page``).
"""

from __future__ import annotations

from pathlib import Path

import vl_convert

from dashboards.page import VEGA_LITE_VERSION, Page

IMAGE_FORMATS = ("png", "svg")


def write_images(
    page: Page, out_dir: Path, formats: tuple[str, ...] = IMAGE_FORMATS, scale: float = 2.0
) -> list[Path]:
    """Write ``{view key}.{format}`` for every chart of ``page`` into ``out_dir``; returns the paths."""
    assert set(formats) <= set(IMAGE_FORMATS), formats
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for view in page.views:
        for fmt in formats:
            path = out_dir / f"{view.key}.{fmt}"
            if fmt == "png":
                path.write_bytes(
                    vl_convert.vegalite_to_png(view.spec, vl_version=VEGA_LITE_VERSION, scale=scale)
                )
            else:
                path.write_text(
                    vl_convert.vegalite_to_svg(view.spec, vl_version=VEGA_LITE_VERSION), encoding="utf-8"
                )
            written.append(path)
    return written
