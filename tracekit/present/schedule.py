"""``tracekit simulate`` and ``tracekit sweep``'s output, and a deadlocked schedule's grid, in words.

The simulator's figures (``tracekit.schedule``) become a headline (the answer in one or two
sentences), terminal tables narrowed to fit 100 columns (``--wide`` shows every column) and the
definitions ``--explain`` prints. Times are in the cost unit the user gave (``--f``, ``--b``, ...).

Not for: generating, simulating or summarizing schedules (``tracekit.schedule``) or printing.
"""

from __future__ import annotations

from typing import Any

import orjson
import polars as pl

from tracekit.present.result import Result, Table
from tracekit.schedule.engine import ScheduleDeadlock, Timeline
from tracekit.schedule.metrics import DEFINITIONS, Summary
from tracekit.schedule.model import Schedule

SWEEP_COLUMNS = (
    "schedule",
    "pp",
    "microbatches",
    "makespan",
    "bubble_rate",
    "param_copies",
    "speedup_vs_baseline",
    "gpu_hours_recovered_per_mtok",
)
"""The sweep table's columns a terminal shows by default; ``--wide`` adds the others."""

SWEEP_HEADERS = {
    "microbatches": "M",
    "makespan": "step",
    "bubble_rate": "bubble rate",
    "peak_activations": "peak act.",
    "param_copies": "copies",
    "speedup_vs_baseline": "speed-up",
    "gpu_hours_per_mtok": "GPU-h /Mtok",
    "gpu_hours_recovered_per_mtok": "GPU-h saved /Mtok",
    "max_bubble_fraction": "worst bubble",
}

HEADERS = {
    "microbatches": "micro-batches",
    "makespan": "step (cost units)",
    "bubble_rate": "bubble rate",
    "bubble_fraction": "bubble fraction",
    "peak_activations": "peak activations",
    "param_copies": "param copies",
    "speedup_vs_baseline": "speed-up",
    "gpu_hours_per_mtok": "GPU-h per Mtok",
    "gpu_hours_recovered_per_mtok": "GPU-h saved per Mtok",
    "max_bubble_fraction": "worst bubble fraction",
}


def simulate_result(name: str, schedule: Schedule, timeline: Timeline, summary: Summary) -> Result:
    """Payload, headline and tables of ``tracekit simulate``."""
    actions = timeline.to_frame()
    # The action table is serialized by polars, column-wise in Rust: a Python dict per action
    # took seconds at hundreds of thousands of actions; orjson embeds the bytes as they are.
    rows = orjson.Fragment(actions.drop("overlapped").write_json())
    payload = summary.to_payload() | {"schedule": rows}
    overview = pl.DataFrame(
        {
            "schedule": [name],
            "pp": [schedule.num_ranks],
            "stages": [schedule.num_stages],
            "microbatches": [schedule.num_microbatches],
            "makespan": [summary.makespan],
            "bubble_rate": [summary.bubble_rate],
            "param_copies": [summary.param_copies],
        }
    )
    ranks = summary.ranks
    idle = float(ranks["bubble_fraction"].mean())  # type: ignore[arg-type]
    peak = float(ranks["peak_activations"].max())  # type: ignore[arg-type]
    headline = (
        f"{name} on {schedule.num_ranks} ranks with {schedule.num_microbatches} micro-batches: a step takes "
        f"{summary.makespan:g} cost units, the ranks idle {idle:.0%} of it on average (bubble rate "
        f"{summary.bubble_rate:.1%}, as the Zero Bubble paper counts it); at most {peak:g} micro-batches' "
        f"activations are held at once.",
        "`tracekit sweep` sets it beside other schedules at the same costs.",
    )
    tables = (
        Table(
            title=f"{name}: ideal schedule (M: micro-batches; step in the cost unit)",
            frame=overview,
            name="summary",
            headers=SWEEP_HEADERS,
        ),
        Table(title="per rank (times in the cost unit)", frame=ranks, name="ranks", headers=HEADERS),
        Table(title="simulated schedule", frame=actions, name="schedule", shown=False),
    )
    return Result(
        payload=payload, tables=tables, headline=headline, definitions=DEFINITIONS + ("times in the cost unit",)
    )


def _sweep_headline(table: pl.DataFrame, baseline: str) -> tuple[str, ...]:
    others = table.filter(pl.col("schedule") != baseline)
    if others.is_empty():
        return (f"Only {baseline} was simulated: nothing to compare it with.",)
    best = others.sort("speedup_vs_baseline", descending=True).row(0, named=True)
    first = (
        f"Fastest against {baseline}: {best['schedule']} at pp {best['pp']} with {best['microbatches']} "
        f"micro-batches, {best['speedup_vs_baseline']:.2f}x {baseline}'s speed (bubble rate "
        f"{best['bubble_rate']:.1%}, {best['param_copies']} parameter cop{'ies' if best['param_copies'] > 1 else 'y'})"
    )
    if "gpu_hours_recovered_per_mtok" in table.columns:
        first += f", saving {best['gpu_hours_recovered_per_mtok']:.3f} GPU-hours per million tokens"
    slower = others.filter(pl.col("speedup_vs_baseline") < 1)
    second = (
        f"{slower.height} of the {others.height} rows are slower than {baseline}."
        if slower.height
        else f"Every other row is at least as fast as {baseline}."
    )
    return (first + ".", second)


def sweep_result(
    table: pl.DataFrame, baseline: str, definitions: tuple[str, ...], skipped: tuple[str, ...]
) -> Result:
    """Payload, headline and table of ``tracekit sweep`` (``table``: ``compare_to_baseline``'s rows)."""
    payload: dict[str, Any] = {"baseline": baseline, "rows": table}
    tables = (
        Table(
            title=f"sweep against {baseline} (M: micro-batches; step in the cost unit; speed-up over {baseline})",
            frame=table,
            name="sweep",
            columns=SWEEP_COLUMNS,
            headers=SWEEP_HEADERS,
        ),
    )
    return Result(
        payload=payload,
        tables=tables,
        warnings=skipped,
        headline=_sweep_headline(table, baseline),
        definitions=definitions,
    )


def deadlock_grid(error: ScheduleDeadlock, before: int = 4, after: int = 2) -> str:
    """A rank-by-step grid around the first stuck step of each rank: ``[x]`` marks it, ``.`` not run."""
    schedule, done = error.schedule, error.done
    stuck = [d for rank, d in enumerate(done) if d < len(schedule.steps[rank])]
    low = max(0, min(stuck) - before)
    high = max(stuck) + after + 1
    width = max(len(str(step)) for steps in schedule.steps for step in steps[low:high]) + 3
    header = "step".ljust(8) + "".join(str(i).ljust(width) for i in range(low, high))
    lines = [header]
    for rank, steps in enumerate(schedule.steps):
        cells = []
        for i in range(low, min(high, len(steps))):
            text = str(steps[i])
            cells.append(
                (f"[{text}]" if i == done[rank] else text if i < done[rank] else f".{text}").ljust(width)
            )
        state = "done" if done[rank] >= len(steps) else f"stuck at step {done[rank]}"
        lines.append(f"rank {rank}".ljust(8) + "".join(cells) + f"({state})")
    return (
        f"{schedule.name} deadlocks: no rank can run its next step "
        "([x] = stuck step, . = not run, plain = done)\n" + "\n".join(lines)
    )
