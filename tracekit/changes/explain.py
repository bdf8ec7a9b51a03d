"""The step-time change between two runs, decomposed by counterfactual replay of NEW.

NEW is replayed as recorded: every op occupies its duration plus its gap
(``ReplayCase.occupied_ms``), which reruns NEW's steps to the nanosecond. Each counterfactual puts
one thing back at BASE's speed and replays again; what it saves is what that thing costs NEW:

- a *group* (``RANK_KEY``: rank, stage, kind; ``STAGE_KEY`` when the runs are compared with
  ``allow_different``): every NEW op of the group put at BASE's median speed
  (``tracekit.whatif.speed``: an op at or below the group's median scales by
  ``base_median_ms / new_median_ms``, one above keeps its excess; its noise stays, its systematic
  change goes; a group that got faster costs negative time);
- a *rank*: all of that rank's groups together (``RANK_KEY`` only);
- a *link* (an unordered rank pair, ``tracekit.stragglers.links``): every transfer's exposed
  latency scaled by ``base_latency_ms / new_latency_ms``, so each consumer starts that much sooner
  (later, when the link got faster) after its data, never before it is ready;
- *all*: every group and every link together.

``saving_ms`` is NEW's mean replayed step minus the counterfactual's. Singles (groups and links)
need not add up to *all*: a rank and its neighbour both slower save little alone and much
together. ``interactions_ms`` = all - the singles' sum is stated, not hidden; what replay does not
model at all (host work off the labelled actions, a slower collective) is the measured change
minus *all*. Every counterfactual replays in one batch (``tracekit.whatif.counterfactuals``).

``EXPLAINED_SCHEMA``, one row per rank, group and link, largest saving first:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| level | String | ``rank``, ``group`` or ``link`` | never null |
| name | String | ``rank 1``, ``rank 1 stage 1 F`` (``stage 1 F`` per stage), ``link 1-2`` | never null |
| rank | Int32 | the rank | a link, or a group compared per stage |
| stage, kind | Int32, String | the group's stage and op type (``F&B``: an overlapped pair) | a rank or a link |
| rank_a, rank_b | Int32 | the link's ranks, rank_a < rank_b | not a link |
| ops | Int64 | NEW's ops (link: transfers) it covers | never null |
| base_ms, new_ms | Float64 | median duration of an op (link: median exposed latency) in BASE and NEW, ms | a rank |
| change_pct | Float64 | new_ms / base_ms - 1, percent | a rank, or base_ms 0 |
| own_change_ms | Float64 | per step, the time NEW's ops spend beyond BASE's speed (sum over the ops, mean over steps), ms | never null |
| saving_ms | Float64 | NEW's mean replayed step minus the counterfactual's, ms | never null |
| share | Float64 | saving_ms / the measured change of the median step (the headline's) | the change is 0 |

Not for: which groups are new or gone (``tracekit.changes.work``) or the noise band (``steps``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.changes.shape import RANK_KEY
from tracekit.whatif.case import ReplayCase
from tracekit.whatif.counterfactuals import Change, Counterfactuals, rows_by
from tracekit.whatif.speed import at_speed

EXPLAINED_SCHEMA: dict[str, pl.DataType] = {
    "level": pl.String(),
    "name": pl.String(),
    "rank": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "rank_a": pl.Int32(),
    "rank_b": pl.Int32(),
    "ops": pl.Int64(),
    "base_ms": pl.Float64(),
    "new_ms": pl.Float64(),
    "change_pct": pl.Float64(),
    "own_change_ms": pl.Float64(),
    "saving_ms": pl.Float64(),
    "share": pl.Float64(),
}

SAVING_DEFINITION = (
    "the step time NEW saves when only that group (link) runs at BASE's speed (latency), "
    "NEW replayed as recorded (durations plus gaps), mean over steps; interactions: all at BASE's "
    "speed together minus the singles' sum"
)
"""What ``saving_ms`` means, as every output quotes it."""


@dataclass(frozen=True)
class Transfers:
    """NEW's cross-rank transfers and BASE's median latency per link (``tracekit.changes.transfers``)."""

    new: pl.DataFrame
    """One row per transfer: op_row (Int64, the consumer's row in NEW's case), rank_a, rank_b, latency_ms."""
    base: pl.DataFrame
    """One row per link of BASE: rank_a, rank_b, latency_ms (median exposed latency)."""


@dataclass(frozen=True)
class Explanation:
    """The decomposed change: one row per rank, group and link, and the totals around them."""

    rows: pl.DataFrame
    """``EXPLAINED_SCHEMA``."""
    new_mean_ms: float
    """NEW's mean step, replayed as recorded (equal to its measured mean)."""
    mean_change_ms: float
    """NEW's mean measured step minus BASE's, ms: what the savings are shares of."""
    all_saving_ms: float
    """Saving with every group and link at BASE's speed together."""
    singles_ms: float
    """Sum of the groups' and links' own savings."""
    interactions_ms: float
    """``all_saving_ms - singles_ms``."""
    unexplained_ms: float
    """``mean_change_ms - all_saving_ms``: what replaying the labelled work and its transfers does not model."""


def _medians(ops: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    return ops.group_by(key).agg(pl.col("duration_ms").median().alias("median_ms"), pl.len().alias("ops"))


def _group_factors(new_ops: pl.DataFrame, base_ops: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """Per group NEW and BASE share: key, ops, new_ms, base_ms and factor = base_ms / new_ms (1 when new_ms is 0)."""
    new = _medians(new_ops, key).rename({"median_ms": "new_ms"})
    base = _medians(base_ops, key).rename({"median_ms": "base_ms"}).drop("ops")
    return new.join(base, on=key, how="inner").with_columns(
        pl.when(pl.col("new_ms") > 0)
        .then(pl.col("base_ms") / pl.col("new_ms"))
        .otherwise(1.0)
        .alias("factor")
    )


def _group_name(key: list[str], values: tuple) -> str:
    fields = dict(zip(key, values))
    stage_kind = f"stage {fields['stage']} {fields['kind']}"
    return f"rank {fields['rank']} {stage_kind}" if "rank" in fields else stage_kind


def explain(
    case: ReplayCase,
    base_ops: pl.DataFrame,
    key: tuple[str, ...],
    mean_change_ms: float,
    transfers: Transfers | None = None,
    new_ops: pl.DataFrame | None = None,
    median_change_ms: float | None = None,
) -> Explanation:
    """Decompose NEW's step-time change: ``case`` is NEW replayed, ``base_ops`` BASE's op instances.

    ``base_ops`` holds rank, stage, optype and duration_ms per op; ``new_ops`` the same of NEW,
    derived as ``base_ops`` were so that equal runs get equal medians (None: ``case.ops``); ``key``
    is ``RANK_KEY`` or ``STAGE_KEY``; ``transfers`` adds links (None: no link is priced, as for
    op-tables). ``share`` is of ``median_change_ms`` (None: of ``mean_change_ms``).
    """
    columns = [("optype" if name == "kind" else name) for name in key]
    ops = case.ops
    duration, gap = ops["duration_ms"].to_numpy(), ops["gap_ms"].to_numpy()
    steps = len(case.steps)
    replays = Counterfactuals(case, case.occupied_ms(duration))
    realized_ms = float(replays.base_steps.mean())
    medians_of = ops if new_ops is None else new_ops
    groups = _group_factors(
        medians_of.select(*columns, "duration_ms"), base_ops.select(*columns, "duration_ms"), columns
    )
    groups = groups.drop("ops").join(_medians(ops, columns).select(*columns, "ops"), on=columns)
    factor = np.ones(ops.height)
    median = np.zeros(ops.height)
    rows_of = rows_by(ops, columns)
    entries: list[dict] = []
    changes: list[Change] = []
    for group in groups.iter_rows(named=True):
        values = tuple(group[c] for c in columns)
        rows = rows_of[values]
        factor[rows], median[rows] = group["factor"], group["new_ms"]
        scaled = at_speed(duration[rows], factor[rows], median[rows])
        changes.append(Change(rows, case.occupied_ms(scaled, rows)))
        fields = dict(zip(key, values))
        entries.append(
            {
                "level": "group",
                "name": _group_name(list(key), values),
                "rank": fields.get("rank"),
                "stage": fields["stage"],
                "kind": fields["kind"],
                "ops": rows.size,
                "base_ms": group["base_ms"],
                "new_ms": group["new_ms"],
                "own_change_ms": float((duration[rows] - scaled).sum()) / steps,
            }
        )
    singles = len(changes)
    # Links: each consumer's exposed latency scaled to BASE's median over the link.
    cut = np.zeros(ops.height)
    if transfers is not None and not transfers.new.is_empty():
        links = (
            transfers.new.group_by("rank_a", "rank_b")
            .agg(pl.col("op_row"), pl.col("latency_ms"), pl.col("latency_ms").median().alias("new_ms"))
            .join(transfers.base.rename({"latency_ms": "base_ms"}), on=["rank_a", "rank_b"], how="inner")
            .sort("rank_a", "rank_b")
        )
        for link in links.iter_rows(named=True):
            op_rows = np.asarray(link["op_row"], dtype=np.int64)
            latency = np.asarray(link["latency_ms"], dtype=np.float64)
            scale = link["base_ms"] / link["new_ms"] if link["new_ms"] > 0 else 1.0
            nodes, position = np.unique(op_rows, return_inverse=True)
            link_cut = np.zeros(nodes.size)
            np.add.at(link_cut, position, latency * (1.0 - scale))
            # Never before ready: a cut is at most the gap (a consumer that got later may wait longer).
            link_cut = np.minimum(link_cut, np.maximum(gap[nodes], 0.0))
            cut[nodes] += link_cut
            changes.append(Change(nodes, np.maximum(duration[nodes] + gap[nodes] - link_cut, 0.0)))
            singles += 1
            entries.append(
                {
                    "level": "link",
                    "name": f"link {link['rank_a']}-{link['rank_b']}",
                    "rank_a": link["rank_a"],
                    "rank_b": link["rank_b"],
                    "ops": op_rows.size,
                    "base_ms": link["base_ms"],
                    "new_ms": link["new_ms"],
                    "own_change_ms": float(link_cut.sum()) / steps,
                }
            )
    if key == RANK_KEY:
        by_rank = rows_by(ops, ["rank"])
        for (rank,), rows in sorted(by_rank.items()):
            scaled = at_speed(duration[rows], factor[rows], median[rows])
            changes.append(Change(rows, case.occupied_ms(scaled, rows)))
            entries.append(
                {
                    "level": "rank",
                    "name": f"rank {rank}",
                    "rank": rank,
                    "ops": rows.size,
                    "own_change_ms": float((duration[rows] - scaled).sum()) / steps,
                }
            )
    every = np.arange(ops.height)
    changes.append(Change(every, np.maximum(at_speed(duration, factor, median) + gap - cut, 0.0)))
    replayed = replays.step_times(changes)
    savings = realized_ms - replayed.mean(axis=1)
    for entry, saving in zip(entries, savings[:-1]):
        entry["saving_ms"] = float(saving)
    all_saving = float(savings[-1])
    singles_ms = float(savings[:singles].sum())
    share_of = mean_change_ms if median_change_ms is None else median_change_ms
    frame = (
        pl.DataFrame(entries, schema=EXPLAINED_SCHEMA) if entries else pl.DataFrame(schema=EXPLAINED_SCHEMA)
    )
    frame = frame.with_columns(
        pl.when(pl.col("base_ms") > 0)
        .then(100.0 * (pl.col("new_ms") / pl.col("base_ms") - 1.0))
        .alias("change_pct"),
        (pl.col("saving_ms") / share_of if share_of != 0 else pl.lit(None, pl.Float64())).alias("share"),
    ).sort(["saving_ms", "level", "name"], descending=[True, False, False])
    return Explanation(
        rows=frame.cast(EXPLAINED_SCHEMA),  # type: ignore[arg-type]
        new_mean_ms=realized_ms,
        mean_change_ms=mean_change_ms,
        all_saving_ms=all_saving,
        singles_ms=singles_ms,
        interactions_ms=all_saving - singles_ms,
        unexplained_ms=mean_change_ms - all_saving,
    )
