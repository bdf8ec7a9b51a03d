"""The reference each rank's ops are set beside: its peers, its expected cost, or its own history.

The one ideal (``tracekit.analysis.ideal``) is built on these references, and straggler scoring
(``tracekit.stragglers.scoring``) judges against them, so both read one rule.

For every (rank, stage, kind), the rank's median duration is set beside one reference, the first
that exists:

1. ``peers``: the same stage run by other ranks: the data-parallel replicas of a stage (within one
   replica a stage runs on one rank, ``tracekit.whatif.pipeline``, so every other rank holding it
   is another replica's; with two or more replicas every rank has them, the first and last stage
   too); else the other ranks running the kind at the same place on the micro-batch's path
   (first, middle, last), on a stage of the same recorded work (when ``run.json`` records it). The
   reference is the median of the peers' medians.
2. ``expected``: the expected cost of the rank's own work, for ranks without peers (in a single
   pipeline: the first and last stage, a V schedule's rank 0, a 2-stage pipeline). Per kind, a cost per unit of work is
   taken from the other ranks' stages, ``rate = median over their (stage) rows of median_ms /
   work``, and scaled by the stage's work (``tracekit.analysis.work``: compute parameters, which
   leave embedding tables out and count a head in full); a rank's own durations never set its own
   reference.
3. ``history``: neither exists (no peers and no recorded stage work): each step is judged against
   the rank's own other steps. This sees one-off slowness only; a rank slow in every step looks
   normal against itself, so such rows are never named stragglers (``scoring`` lists the rank as
   unjudged, with this reason).

The reference for a step (``by=["step"]``) uses the same rule within that step, so persistence
(slow in most steps) and one-off slowness can be told apart.

``REFERENCE_SCHEMA``, one row per (rank, stage, kind[, step]):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank, stage | Int32 | global rank and stage | never null |
| kind | String | action kind / compute op type | never null |
| work | String | place on the micro-batch's path (``first``, ``middle``, ``last``; op-table: stage) | never null |
| step | Int64 | training step (only with ``by=["step"]``) | never null |
| actions | Int64 | actions of this row | never null |
| median_ms | Float64 | own median duration, ms | never null |
| reference | String | ``peers``, ``expected`` or ``history`` | never null |
| references | Int64 | how many other ranks (peers, expected) or other steps (history) set the reference | never null |
| reference_ms | Float64 | the reference duration, ms | no reference (history with one step) |

Not for: the ideal durations (``tracekit.analysis.ideal``), pricing or flagging (``tracekit.stragglers``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from tracekit.analysis.medians import RankValues


def _buckets(ranks: list[int], values: list[float], keys: list) -> dict:
    """Per key: the values of the rows holding it, by rank (``RankValues``)."""
    rows: dict = {}
    for rank, value, key in zip(ranks, values, keys):
        rows.setdefault(key, ([], []))
        rows[key][0].append(value)
        rows[key][1].append(rank)
    return {key: RankValues(held, holders) for key, (held, holders) in rows.items()}


def expected_cost(others: Sequence[tuple[float, float]], work: float = 1.0) -> float:
    """The expected duration of ``work`` from other ranks' ``(duration, work)`` pairs (rule 2).

    Their median duration per unit of work, times ``work``: a rank's own durations never set it.
    """
    return float(np.median([duration / unit for duration, unit in others])) * work


REFERENCE_KINDS = ("peers", "expected", "history")
"""The references, most trusted first."""


def own_medians(compute: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Median duration and action count per (rank, stage, kind, work, *by) of the compute ops."""
    return (
        compute.group_by("rank", "stage", "optype", "work", *by)
        .agg(pl.col("duration_ms").median().alias("median_ms"), pl.len().cast(pl.Int64()).alias("actions"))
        .rename({"optype": "kind"})
        .sort("rank", "stage", "kind", "work", *by)
    )


def _history(medians: pl.DataFrame) -> dict[tuple[int, int, str, int], tuple[int, float | None]]:
    """(rank, stage, kind, step) -> (other steps, median of their medians)."""
    out: dict[tuple[int, int, str, int], tuple[int, float | None]] = {}
    for (rank, stage, kind), group in medians.group_by("rank", "stage", "kind", maintain_order=True):
        steps, values = group["step"].to_list(), group["median_ms"].to_list()
        for index, step in enumerate(steps):
            others = values[:index] + values[index + 1 :]
            out[(rank, stage, kind, step)] = (len(others), float(np.median(others)) if others else None)
    return out


def references(
    medians: pl.DataFrame, stage_work: pl.DataFrame, by: list[str], history: pl.DataFrame | None = None
) -> pl.DataFrame:
    """``REFERENCE_SCHEMA``: each row of ``own_medians(.., by)`` with its reference (module docstring).

    ``history`` is ``own_medians(.., ["step"])``; it sets the reference of per-step rows that have
    neither peers nor an expected cost (only used when ``by == ["step"]``).
    """
    work = dict(zip(stage_work["stage"].to_list(), stage_work["work"].to_list()))
    shape = {
        stage: (params, layers)
        for stage, params, layers in stage_work.select("stage", "compute_params", "layers").iter_rows()
    }
    own_history = _history(history) if history is not None and by == ["step"] else {}
    rows: list[dict] = []
    for _, group in medians.group_by("kind", *by, maintain_order=True):
        columns = {
            name: group[name].to_list() for name in ("kind", *by, "rank", "stage", "work", "median_ms")
        }
        ranks, stages, roles, values = (
            columns["rank"],
            columns["stage"],
            columns["work"],
            columns["median_ms"],
        )
        # Per stage, per (role, work shape), and over the group: values by rank, so that a row's
        # peers (its bucket without its own rank) take one lookup, not a scan of every other rank.
        by_stage = _buckets(ranks, values, stages)
        by_role = _buckets(ranks, values, [(role, shape.get(stage)) for role, stage in zip(roles, stages)])
        costed = all(stage in work and work[stage] > 0 for stage in stages)
        rates = (
            RankValues([value / work[stage] for value, stage in zip(values, stages)], ranks)
            if costed
            else None
        )
        unpriced = {rank for rank, stage in zip(ranks, stages) if not (stage in work and work[stage] > 0)}
        for index, (rank, stage, role) in enumerate(zip(ranks, stages, roles)):
            count, middle = by_stage[stage].without(rank)
            if not count:
                count, middle = by_role[(role, shape.get(stage))].without(rank)
            reference, reference_ms = "history", None
            if count:
                reference, reference_ms = "peers", float(np.median(middle))
            else:
                # The expected cost needs the work of every other rank's stages (this rank's own
                # other stages may lack it) and of this stage.
                others, rate = 0, np.zeros(0)
                if stage in work and costed:
                    others, rate = rates.without(rank)  # type: ignore[union-attr]
                elif stage in work and unpriced <= {rank}:
                    # Only this rank holds a stage without work: its peers' rates, counted afresh.
                    kept = [index for index, other in enumerate(ranks) if other != rank]
                    others, rate = RankValues(
                        [values[j] / work[stages[j]] for j in kept], [ranks[j] for j in kept]
                    ).without(rank)
                if others:
                    reference, count = "expected", others
                    reference_ms = expected_cost([(value, 1.0) for value in rate.tolist()], work[stage])
                elif own_history:
                    key = (rank, stage, columns["kind"][index], columns["step"][index])
                    count, reference_ms = own_history[key]
            rows.append(
                {
                    **{name: columns[name][index] for name in ("kind", *by)},
                    "rank": rank,
                    "stage": stage,
                    "work": role,
                    "reference": reference,
                    "references": count,
                    "reference_ms": reference_ms,
                }
            )
    schema = {"kind": pl.String(), **{name: medians.schema[name] for name in by}} | {
        "rank": pl.Int32(),
        "stage": pl.Int32(),
        "work": pl.String(),
        "reference": pl.String(),
        "references": pl.Int64(),
        "reference_ms": pl.Float64(),
    }
    found = pl.DataFrame(rows, schema=schema)
    return medians.join(found, on=["rank", "stage", "kind", "work", *by], how="left").sort(
        "rank", "stage", "kind", *by
    )
