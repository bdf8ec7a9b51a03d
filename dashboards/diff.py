"""The dashboard's diff section (``tracekit dashboard NEW --baseline BASE``): what changed since BASE.

Two charts from a ``RunDiff``: both runs' realized timelines of one step on one time axis (BASE
above NEW, each from its step's first start), and the explained change as bars: per rank, group
or link, the step time NEW saves with only it at BASE's speed (``tracekit.changes.explain``), the
same rows ``tracekit diff`` prints. Within noise the bars are the largest changes in duration.

Not for: computing the diff (``tracekit.run_diff``) or the page around it (``dashboards.build``).
"""

from __future__ import annotations

import altair as alt
import polars as pl

from dashboards.encoding import inline
from dashboards.page import Section, View
from dashboards.timeline import TimelineLimits, from_realized, timeline_chart
from tracekit.present.diff import headline, shown_rows
from tracekit.run_diff import RunDiff

TITLE = "Against the baseline: what changed"

LEVEL_COLORS = {"rank": "#0072B2", "group": "#56B4E9", "link": "#E69F00"}
"""Bar colour per row level (colour-blind safe)."""


def _step_actions(actions: pl.DataFrame, step: int | None) -> tuple[pl.DataFrame, int]:
    chosen = (
        int(actions["step"].min()) if step is None or step not in set(actions["step"].to_list()) else step
    )  # type: ignore[arg-type]
    return actions.filter(pl.col("step") == chosen), chosen


def both_timelines(result: RunDiff, step: int | None = None) -> tuple[pl.DataFrame, str]:
    """Both runs' realized actions of one step (``TIMELINE_SCHEMA``, timeline ``base``/``new``, each from its
    step's first start), and a caption naming the steps."""
    frames, steps = [], []
    for name, analysis in (("base", result.base), ("new", result.new)):
        shown, chosen = _step_actions(analysis.actions, step)
        steps.append(chosen)
        frames.append(
            from_realized(shown, int(shown["start_ns"].min())).with_columns(pl.lit(name).alias("timeline"))
        )  # type: ignore[arg-type]
    return pl.concat(frames), f"BASE step {steps[0]} above NEW step {steps[1]}, one time axis"


def explained_chart(rows: pl.DataFrame, title: str) -> alt.Chart:
    """Bars of saving_ms per row (largest first), coloured by level, own change in the tooltip."""
    return (
        alt.Chart(inline(rows.select("name", "level", "saving_ms", "own_change_ms", "share")))
        .mark_bar()
        .encode(
            x=alt.X("saving_ms:Q", title="step time NEW saves with only this at BASE's speed (ms)"),
            y=alt.Y("name:N", sort="-x", title=None),
            color=alt.Color(
                "level:N", scale=alt.Scale(domain=list(LEVEL_COLORS), range=list(LEVEL_COLORS.values()))
            ),
            tooltip=[
                alt.Tooltip("name:N"),
                alt.Tooltip("saving_ms:Q", format=".2f", title="saving (ms)"),
                alt.Tooltip("own_change_ms:Q", format=".2f", title="own change per step (ms)"),
                alt.Tooltip("share:Q", format=".0%", title="share of the change"),
            ],
        )
        .properties(title=title, width=520, height=min(18 * rows.height + 20, 400))
    )


def diff_section(result: RunDiff, step: int | None = None, limits: TimelineLimits | None = None) -> Section:
    """The diff section: both timelines of ``step`` (None: each run's first) and the explained change."""
    frame, caption = both_timelines(result, step)
    views = [View.of("diff-timelines", timeline_chart(frame, caption, limits), renderer="canvas")]
    rows = shown_rows(result)
    if not rows.is_empty():
        title = (
            "what explains the change"
            if result.step_change.beyond_noise
            else "largest changes in duration (none moves the median step beyond noise)"
        )
        views.append(View.of("diff-explained", explained_chart(rows, title)))
    e = result.explanation
    notes = (
        headline(result),
        f"BASE: {result.base.source}",
        (
            f"all at BASE's speed together saves {e.all_saving_ms:.1f} ms of the {e.mean_change_ms:+.1f} ms mean change; "
            f"interactions {e.interactions_ms:+.1f} ms, not modelled by replay {e.unexplained_ms:+.1f} ms"
        ),
    )
    return Section("diff", TITLE, views=tuple(views), notes=notes)
