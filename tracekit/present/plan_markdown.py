"""Render a ``Plan`` as a Markdown report: recommendation, alternatives, ruled out, parameter copies, assumptions.

Presentation only: every figure comes from ``tracekit.planner.plan.Plan`` and every sentence from
``tracekit.present.plan``; nothing here computes. Tables hold the figures and fit 100 columns;
the sentences (why a candidate does not fit, why one was ruled out) are list items under them.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from tracekit.planner.plan import Plan
from tracekit.present.plan import assumptions, reasons, split_alternatives

_ALTERNATIVE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("schedule", "schedule"),
    ("pp", "PP"),
    ("microbatches", "M"),
    ("param_copies", "copies"),
    ("step_ms", "step ms"),
    ("bubble_fraction", "bubble"),
    ("exposed_a2a_ms", "a2a ms"),
    ("lost_fraction", "lost"),
    ("memory_gib", "mem"),
    ("headroom_gib", "free"),
    ("extra_gpu_hours_per_mtok", "extra"),
    ("simulated_at", "sim. at M"),
)
_UNFIT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("schedule", "schedule"),
    ("pp", "PP"),
    ("microbatches", "M"),
    ("step_ms", "step (ms)"),
    ("memory_gib", "memory (GiB)"),
    ("over_gib", "over (GiB)"),
)
_PERCENT = frozenset({"bubble_fraction", "lost_fraction"})
_THREE_PLACES = frozenset({"gpu_hours_per_mtok", "extra_gpu_hours_per_mtok"})


def _cell(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if column in _PERCENT:
        return f"{value:.1%}"
    if column in _THREE_PLACES:
        return f"{value:+.3f}" if column.startswith("extra") else f"{value:.3f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value).replace("|", "\\|")


def _table(frame: pl.DataFrame, columns: tuple[tuple[str, str], ...]) -> list[str]:
    lines = ["| " + " | ".join(title for _, title in columns) + " |", "|" + "---|" * len(columns)]
    for row in frame.iter_rows(named=True):
        lines.append("| " + " | ".join(_cell(name, row[name]) for name, _ in columns) + " |")
    return lines


def _candidate(row: dict[str, Any]) -> str:
    """``zbv at PP8`` (with ``, M 60`` where the row has micro-batches): a candidate in a sentence."""
    named = f"{row['schedule']} at PP{row['pp']}"
    return f"{named}, M {row['microbatches']}" if "microbatches" in row else named


def render(plan: Plan) -> str:
    """The Markdown report of ``plan``."""
    spec, rec = plan.spec, plan.recommendation
    lines = [f"# Pipeline plan: {spec.model.name} on {spec.cluster.name} ({spec.cluster.gpus} GPUs)", ""]
    if rec is not None:
        lines += [
            f"## Recommendation: {rec['schedule']}, PP{rec['pp']}, {rec['microbatches']} micro-batches",
            "",
            (
                f"Expected bubble fraction **{rec['bubble_fraction']:.1%}**, step {rec['step_ms']:,.1f} ms, "
                f"{rec['gpu_hours_per_mtok']:.3f} GPU-hours per million tokens."
            ),
            "",
        ]
    else:
        lines += ["## No feasible plan", ""]
    lines += [f"- {reason}" for reason in reasons(plan)] + [""]
    fitting, unfit = split_alternatives(plan.alternatives)
    if not fitting.is_empty():
        lines += ["## Alternatives", ""]
        lines += _table(fitting, _ALTERNATIVE_COLUMNS)
        lines += [
            "",
            (
                "bubble: mean over ranks of idle / step; a2a: exposed all-to-all; lost: 1 - mean compute / "
                "step (bubbles and exposed all-to-all); mem, free: GiB on the fullest rank; extra: GPU-hours per "
                "million tokens against the recommendation; sim. at M: the micro-batch counts simulated, two "
                "when the figures are extrapolated from them."
            ),
            "",
        ]
    if not unfit.is_empty():
        lines += [f"## Do not fit in {spec.cluster.gpu_memory_gib:g} GiB per GPU", ""]
        lines += _table(unfit, _UNFIT_COLUMNS) + ["", "Why each does not fit:", ""]
        lines += [f"- {_candidate(row)}: {row['note']}." for row in unfit.iter_rows(named=True)] + [""]
    if not plan.rejected.is_empty():
        lines += ["## Ruled out before simulation", ""]
        lines += [f"- {_candidate(row)}: {row['reason']}." for row in plan.rejected.iter_rows(named=True)]
        lines += [""]
    copy = plan.second_copy
    lines += [
        "## DualPipe's second parameter copy",
        "",
        (
            f"DualPipe runs both directions over their own copy of every layer (2x parameters). At PP{copy.pp} "
            f"one copy is {copy.params_per_gpu / 1e9:.2f}B parameters per GPU "
            f"({copy.params_per_gpu_without_ep / 1e9:.2f}B without expert parallelism); its weights, gradients "
            f"and optimizer shard take {copy.state_gib:.1f} GiB, {copy.share_of_memory:.0%} of the GPU's "
            f"{spec.cluster.gpu_memory_gib:g} GiB: what the second copy adds. Routed experts are "
            f"{copy.routed_fraction:.0%} of the model's {copy.total_params / 1e9:.1f}B parameters (ep={copy.ep})."
        ),
        "",
    ]
    if plan.compute_to_a2a is not None:
        lines += [f"Forward compute : all-to-all = {plan.compute_to_a2a:.2f} : 1.", ""]
    lines += ["## Assumptions", ""] + [f"- {assumption}" for assumption in assumptions(plan)] + [""]
    return "\n".join(lines)
