"""The ideal: what each op of a run should have taken, and the ideal step, written down once.

``IDEAL_DEFINITION`` is the sentence every output quotes (``tracekit whatif``, ``report``, the
dashboard's ideal timeline and bubble, straggler prices); ``ideal_durations`` computes what it says.

Ideal duration of an op (``method="robust"``, the default for captured runs): the lower of its
rank's median duration of that (stage, op type) over all steps and its *reference*, the median
of the other ranks doing the same work (``tracekit.analysis.references``: the stage's replicas,
else the ranks at the same place on the micro-batch's path with the same recorded work; else the
expected cost of the stage's recorded work from the other ranks' rates). A rank with neither
(no peers, no recorded work: a single pipeline's first or last stage) takes the median of the
other ranks' paces of that op type, whatever their work (``basis`` ``other ranks``; straggler
scoring does not judge it, so it is not priced); with no other rank running the op type, its own
median (``own steps``). So a straggler never sets its own ideal, and a
healthy rank is never handed a straggler's pace (it keeps its own when that is faster); an ideal
is never slower than what the rank has shown it can do. Straggler scoring judges against the same
references, and a straggler's price replays its ops at these ideal durations
(``tracekit.stragglers.price``), so the price and the what-if read one ideal.

Ideal step: the run's recorded dependency graph (``tracekit.whatif``) replayed with every op at its
ideal duration, each op starting its recorded gap after what it waits for (transfer latency,
launch, host work: ``ReplayCase.occupied_ms``), so the ideal step and the measured one differ by
the ops' durations alone. The paper's replay (``WhatIfConfig.replay = "durations"``) leaves the
gaps out, on both sides.

``method="osdi25"`` is the OSDI'25 what-if artifact's definition: each op type's mean (compute) or
median (communication, ``ideal_stat``) over every instance of the run, every stage and straggler
included. It is the default for op-tables, the artifact's own input format, so their figures are
the paper's; captured runs default to ``robust``. ``Ideal.method`` says which was used.

``IDEAL_SCHEMA``, one row per (rank, stage, optype, work):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| stage | Int32 | pipeline stage (an F&B pair: its forward half's) | never null |
| optype | String | op type (``OPS_SCHEMA``) | never null |
| work | String | work class (``OPS_SCHEMA``) | never null |
| ideal_ms | Float64 | ideal duration of one op, ms | never null |
| own_median_ms | Float64 | the rank's own median, ms | never null |
| references | Int64 | other ranks that set the reference (0: own steps, osdi25) | never null |
| basis | String | ``peers``, ``expected``, ``other ranks``, ``own steps`` or ``osdi25`` | never null |

Not for: replaying (``tracekit.whatif``) or flagging stragglers (``tracekit.stragglers``), which
read these durations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from tracekit.analysis.choices import IDEAL_DEFINITION as IDEAL_DEFINITION
from tracekit.analysis.choices import OSDI25_DEFINITION as OSDI25_DEFINITION
from tracekit.analysis.choices import IdealConfig as IdealConfig
from tracekit.analysis.choices import IdealMethod as IdealMethod
from tracekit.analysis.dependencies import PATH_ROLE, with_paths
from tracekit.analysis.medians import RankValues
from tracekit.analysis.references import own_medians, references
from tracekit.analysis.work import empty_stage_work
from tracekit.schedule.costs import Costs


PAPER_REPLAY = "the paper's replay: durations only, every gap left out"
"""Quoted after the definition when the what-if replays durations alone (``WhatIfConfig.replay``)."""

IDEAL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "stage": pl.Int32(),
    "optype": pl.String(),
    "work": pl.String(),
    "ideal_ms": pl.Float64(),
    "own_median_ms": pl.Float64(),
    "references": pl.Int64(),
    "basis": pl.String(),
}

PAIR_OPTYPE = "F&B"
"""Op type of an overlapped forward/backward pair (``tracekit.whatif.pipeline.PAIR_KIND``)."""

_KEY = ["rank", "stage", "optype", "work"]


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
    """One row per (rank, stage, optype, work), ``IDEAL_SCHEMA``."""
    method: IdealMethod
    references: pl.DataFrame
    """The references the robust ideal took (``tracekit.analysis.references.REFERENCE_SCHEMA``, one
    row per (rank, stage, kind)), which straggler scoring judges against."""

    @property
    def definition(self) -> str:
        """The sentence outputs quote for this ideal: ``IDEAL_DEFINITION`` or ``OSDI25_DEFINITION``."""
        return IDEAL_DEFINITION if self.method == "robust" else OSDI25_DEFINITION

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


def _other_ranks(refs: pl.DataFrame) -> list[float | None]:
    """Per row of ``refs``: the median over the other ranks of their mean pace of the row's kind, whatever their work."""
    per_rank: dict[str, dict[int, list[float]]] = {}
    for rank, kind, median in refs.select("rank", "kind", "median_ms").iter_rows():
        per_rank.setdefault(kind, {}).setdefault(rank, []).append(median)
    means = {
        kind: RankValues([sum(v) / len(v) for v in ranks.values()], list(ranks)) for kind, ranks in per_rank.items()
    }
    out: list[float | None] = []
    for rank, kind in refs.select("rank", "kind").iter_rows():
        others, middle = means[kind].without(rank)
        out.append(float(np.median(middle)) if others else None)
    return out


def _robust(refs: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, stage, optype, work): the lower of the own median and the reference (module docstring)."""
    unjudged = pl.col("reference") == "history"
    return refs.with_columns(pl.Series("others_ms", _other_ranks(refs), dtype=pl.Float64())).select(
        "rank",
        "stage",
        pl.col("kind").alias("optype"),
        "work",
        pl.min_horizontal(
            "median_ms",
            pl.when(unjudged).then(pl.col("others_ms")).otherwise(pl.col("reference_ms")).fill_null(pl.col("median_ms")),
        ).alias("ideal_ms"),
        pl.col("median_ms").alias("own_median_ms"),
        pl.when(~unjudged).then(pl.col("references")).otherwise(0).alias("references"),
        pl.when(~unjudged)
        .then(pl.col("reference"))
        .when(pl.col("others_ms").is_not_null())
        .then(pl.lit("other ranks"))
        .otherwise(pl.lit("own steps"))
        .alias("basis"),
    )


def _osdi25(ops: pl.DataFrame, refs: pl.DataFrame) -> pl.DataFrame:
    """Per op type over every instance: mean, or median where ``ideal_stat`` says so."""
    typical = ops.group_by("optype").agg(
        pl.when(pl.col("ideal_stat").first() == "median")
        .then(pl.col("duration_ms").median())
        .otherwise(pl.col("duration_ms").mean())
        .alias("ideal_ms"),
    )
    return refs.select(
        "rank",
        "stage",
        pl.col("kind").alias("optype"),
        "work",
        pl.col("median_ms").alias("own_median_ms"),
        pl.lit(0, pl.Int64()).alias("references"),
        pl.lit("osdi25").alias("basis"),
    ).join(typical, on="optype")


def ideal_durations(
    ops: pl.DataFrame, method: IdealMethod = "robust", stage_work: pl.DataFrame | None = None
) -> Ideal:
    """The ideal of the ops of a run (``OPS_SCHEMA`` or ``ACTION_OPS_SCHEMA``); see module docstring.

    ``stage_work`` (``tracekit.analysis.work``) sets the expected cost of ranks without peers.
    """
    work = stage_work if stage_work is not None else empty_stage_work()
    refs = references(own_medians(ops, []), work, [])
    table = _robust(refs) if method == "robust" else _osdi25(ops, refs)
    table = table.select(list(IDEAL_SCHEMA)).cast(IDEAL_SCHEMA).sort(_KEY)  # type: ignore[arg-type]
    return Ideal(table=table, method=method, references=refs)


def stage_costs(ideal: Ideal, ops: pl.DataFrame, num_stages: int) -> Costs:
    """The ideal as simulator costs per kind and stage (Kineto runs: F, B, I, W, F&B).

    An op counts toward its ``stage`` (an F&B pair: its forward half's stage); where ranks share a
    stage (data-parallel replicas) their ideals are averaged. A stage that never ran a kind the run
    ran elsewhere costs that kind's mean over the stages that did (a named schedule may run kinds
    where the run did not); a kind never run is NaN. A full backward never run alone is I + W.
    """
    per_stage = (
        ops.select(_KEY)
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
