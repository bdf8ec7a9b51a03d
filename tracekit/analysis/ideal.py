"""The ideal: what each op of a run should have taken, written down once.

Every figure that sets a run beside "what it should have been" reads these durations: the what-if
replay's ideal step time (``tracekit.whatif.attribution``), the dashboard's ideal timeline and its
bubble, and the costs the named-schedule comparison simulates (``tracekit.whatif.named``). One
definition, so the three never disagree about the ideal.

Definition (``method="robust"``, the default for captured runs). Each rank's median duration per
(op type, work), over all its steps, is its *pace* (robust to one-off slow steps; ``work`` is the
column of ``tracekit.whatif.case.OPS_SCHEMA``: Kineto runs: the stage's place on the micro-batch's
path, first, middle or last; op-tables: the stage). The ideal duration of an op is then, by the
first rule that applies (``basis``):

1. ``fastest peer``: other ranks do the same (op type, work): the fastest pace among them and the
   rank itself. A straggler's pace never sets its own ideal, nor its peers' (a median of two
   ranks, or leaving the rank out, would hand a straggler's pace to its only peer);
2. ``other ranks``: no other rank does that work, but others run the op type: the median of
   their paces (whatever their work), so a slow first or last stage still shows, or the rank's own
   pace where that is faster (a first stage computes no input gradient);
3. ``own steps``: no other rank runs the op type: the rank's own pace, the only evidence there is.

An ideal is therefore never slower than the rank's own pace: what a rank has shown it can do is
possible.

``method="osdi25"`` is the OSDI'25 what-if artifact's definition: each op type's mean (compute) or

median (communication, ``ideal_stat``) over every instance of the run, every stage and straggler
included. It is the default for op-tables, the artifact's own input format, so their figures are
the paper's; captured runs default to ``robust``. ``Ideal.method`` says which was used.

``IDEAL_SCHEMA``, one row per (rank, optype, work):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| optype | String | op type (``OPS_SCHEMA``) | never null |
| work | String | work class (``OPS_SCHEMA``) | never null |
| ideal_ms | Float64 | ideal duration of one op, ms | never null |
| own_median_ms | Float64 | the rank's own median, ms | never null |
| peers | Int64 | other ranks doing the same (optype, work) | never null |
| basis | String | ``fastest peer``, ``other ranks``, ``own steps`` or ``osdi25`` | never null |

Not for: replaying (``tracekit.whatif``) or judging stragglers (``tracekit.stragglers``), which
read these durations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from tracekit.analysis.dependencies import PATH_ROLE, with_paths
from tracekit.analysis.medians import RankValues
from tracekit.schedule.costs import Costs

IDEAL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "optype": pl.String(),
    "work": pl.String(),
    "ideal_ms": pl.Float64(),
    "own_median_ms": pl.Float64(),
    "peers": pl.Int64(),
    "basis": pl.String(),
}

IdealMethod = Literal["robust", "osdi25"]

PAIR_OPTYPE = "F&B"
"""Op type of an overlapped forward/backward pair (``tracekit.whatif.pipeline.PAIR_KIND``)."""

_KEY = ["rank", "optype", "work"]


@dataclass(frozen=True)
class IdealConfig:
    """How the ideal durations are taken."""

    method: IdealMethod | None = None
    """``robust``: peers' medians, never the op's own rank; ``osdi25``: the OSDI'25 artifact's means;
    None: ``osdi25`` for op-tables, ``robust`` for captured runs."""

    def __post_init__(self) -> None:
        if self.method not in (None, "robust", "osdi25"):
            raise ValueError(f"ideal method must be robust or osdi25, got {self.method!r}")

    def method_for(self, source: str) -> IdealMethod:
        """The method used for a run read from ``source`` (``op-table``, ``kineto``, ...)."""
        if self.method is not None:
            return self.method
        return "osdi25" if source == "op-table" else "robust"


ACTION_OPS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "stage": pl.Int32(),
    "optype": pl.String(),
    "work": pl.String(),
    "ideal_stat": pl.String(),
    "duration_ms": pl.Float64(),
}
"""The op instances of a realized-actions frame, as the ideal reads them: the columns of
``OPS_SCHEMA`` it needs, one row per action, an overlapped pair one ``F&B`` row (its forward
half's stage, work ``first/last`` style, first to last end)."""


@dataclass(frozen=True)
class Ideal:
    """The ideal durations of a run's ops."""

    table: pl.DataFrame
    """One row per (rank, optype, work), ``IDEAL_SCHEMA``."""
    method: IdealMethod

    def per_op(self, ops: pl.DataFrame) -> np.ndarray:
        """Ideal duration of each row of an ops frame (``OPS_SCHEMA`` or ``ACTION_OPS_SCHEMA``), in its order."""
        per_op = ops.select(_KEY).join(self.table, on=_KEY, how="left", maintain_order="left")["ideal_ms"]
        assert per_op.null_count() == 0, "an op has no ideal duration"
        return per_op.to_numpy()


def action_ops(actions: pl.DataFrame) -> pl.DataFrame:
    """The op instances of realized actions (``REALIZED_SCHEMA``), ``ACTION_OPS_SCHEMA``.

    Work and pairs follow the replay case (``tracekit.whatif.pipeline``: a micro-batch's path is the stages it ran
    on in the step and replica; the halves of a pair are consecutive among a rank's overlapped
    actions), so the rows key the same ideal as the replay case's ops; the data-parallel replicas
    of a stage are each other's peers.
    """
    rows = with_paths(actions).with_columns(
        PATH_ROLE,
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("duration_ms"),
    )
    single = rows.filter(~pl.col("overlapped")).select(
        "rank", "step", "stage", pl.col("kind").alias("optype"), pl.col("role").alias("work"), "duration_ms"
    )
    halves = (
        rows.filter(pl.col("overlapped"))
        .sort("rank", "step", "start_ns", "end_ns", pl.col("kind") != "F", "stage", "microbatch")
        .with_columns((pl.int_range(pl.len()).over("rank", "step") // 2).alias("pair"))
        .sort("rank", "step", "pair", pl.col("kind") != "F")
    )
    pairs = halves.group_by("rank", "step", "pair", maintain_order=True).agg(
        pl.col("stage").first(),
        pl.lit(PAIR_OPTYPE).alias("optype"),
        pl.col("role").str.join("/").alias("work"),
        ((pl.col("end_ns").max() - pl.col("start_ns").min()) / 1e6).alias("duration_ms"),
    )
    return (
        pl.concat([single, pairs.drop("pair")])
        .with_columns(pl.lit("mean").alias("ideal_stat"))
        .select(list(ACTION_OPS_SCHEMA))
        .cast(ACTION_OPS_SCHEMA)  # type: ignore[arg-type]
    )


def expected_cost(others: Sequence[tuple[float, float]], work: float = 1.0) -> float:
    """The expected duration of ``work`` from other ranks' ``(duration, work)`` pairs (rule 2).

    Their median duration per unit of work, times ``work``. The ideal's ``other ranks`` rule calls
    it with every work 1 (the median of their paces); straggler scoring's expected cost
    (``tracekit.stragglers.references``) calls it with each stage's recorded work, so the two are
    one rule and a rank's own durations set neither.
    """
    return float(np.median([duration / unit for duration, unit in others])) * work


def _robust(medians: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, optype, work) pace: the ideal by the rules of the module docstring.

    One pass over the paces: per (optype, work) the fastest and how many ranks run it, per optype
    each rank's mean pace over its works, so no rank's rule looks at every other rank in Python.
    """
    pace = {(r, o, w): m for r, o, w, m in medians.select(*_KEY, "own_median_ms").iter_rows()}
    fastest: dict[tuple[str, str], float] = {}
    sharing: dict[tuple[str, str], int] = {}
    per_rank: dict[str, dict[int, list[float]]] = {}
    for (rank, optype, work), own in sorted(pace.items()):
        fastest[(optype, work)] = min(fastest.get((optype, work), own), own)
        sharing[(optype, work)] = sharing.get((optype, work), 0) + 1
        per_rank.setdefault(optype, {}).setdefault(rank, []).append(own)
    # The median of the other ranks' paces: one per rank, its mean over works.
    means = {
        optype: RankValues([sum(v) / len(v) for v in ranks.values()], list(ranks))
        for optype, ranks in per_rank.items()
    }
    rows = []
    for (rank, optype, work), own in pace.items():
        peers = sharing[(optype, work)] - 1
        others, middle = means[optype].without(rank)
        if peers:
            rows.append((rank, optype, work, fastest[(optype, work)], own, peers, "fastest peer"))
        elif others:
            ideal = expected_cost([(value, 1.0) for value in middle.tolist()])
            rows.append((rank, optype, work, min(own, ideal), own, 0, "other ranks"))
        else:
            rows.append((rank, optype, work, own, own, 0, "own steps"))
    return pl.DataFrame(rows, schema=IDEAL_SCHEMA, orient="row")


def _osdi25(ops: pl.DataFrame, medians: pl.DataFrame) -> pl.DataFrame:
    """Per op type over every instance: mean, or median where ``ideal_stat`` says so."""
    typical = ops.group_by("optype").agg(
        pl.when(pl.col("ideal_stat").first() == "median")
        .then(pl.col("duration_ms").median())
        .otherwise(pl.col("duration_ms").mean())
        .alias("ideal_ms"),
        pl.len().alias("instances"),
    )
    return (
        medians.join(typical, on="optype")
        .with_columns(
            (pl.col("instances") * 0).cast(pl.Int64()).alias("peers"), pl.lit("osdi25").alias("basis")
        )
        .select(list(IDEAL_SCHEMA))
    )


def ideal_durations(ops: pl.DataFrame, method: IdealMethod = "robust") -> Ideal:
    """The ideal of the ops of a run (``OPS_SCHEMA`` or ``ACTION_OPS_SCHEMA``); see module docstring."""
    medians = (
        ops.group_by(_KEY)
        .agg(pl.col("duration_ms").median().alias("own_median_ms"))
        .sort(_KEY)  # one order on every run, whatever the group-by's
    )
    table = _robust(medians) if method == "robust" else _osdi25(ops, medians)
    return Ideal(table=table.cast(IDEAL_SCHEMA).sort(_KEY), method=method)  # type: ignore[arg-type]


def stage_costs(ideal: Ideal, ops: pl.DataFrame, num_stages: int) -> Costs:
    """The ideal as simulator costs per kind and stage (Kineto runs: F, B, I, W, F&B).

    An op counts toward its ``stage`` (an F&B pair: its forward half's stage); where ranks share a
    stage (data-parallel replicas) their ideals are averaged. A stage that never ran a kind the run
    ran elsewhere costs that kind's mean over the stages that did (a named schedule may run kinds
    where the run did not); a kind never run is NaN. A full backward never run alone is I + W.
    """
    per_stage = (
        ops.select("rank", "optype", "work", "stage")
        .unique()
        .join(ideal.table, on=_KEY)
        .group_by("optype", "stage")
        .agg(pl.col("ideal_ms").mean())
    )
    lookup = {(optype, stage): ms for optype, stage, ms in per_stage.iter_rows()}

    def of(optype: str) -> tuple[float, ...]:
        measured = [ms for (kind, _), ms in sorted(lookup.items()) if kind == optype]
        fill = sum(measured) / len(measured) if measured else math.nan
        return tuple(float(lookup.get((optype, stage), fill)) for stage in range(num_stages))

    forward, backward_input, backward_weight = of("F"), of("I"), of("W")
    full = tuple(
        b if not math.isnan(b) else i + w for b, i, w in zip(of("B"), backward_input, backward_weight)
    )
    overlapped = of(PAIR_OPTYPE) if any(optype == PAIR_OPTYPE for optype, _ in lookup) else None
    return Costs(forward, backward_input, backward_weight, full, overlapped, 0.0)
