"""Straggler scoring: every rank's compute against its reference, priced in step time.

Only compute is judged here: communication and waiting are excluded because transfers equalize
wall time (the rank waited on looks as slow as the one it waits for); slow links are
``tracekit.stragglers.links``.

- Clock: the compute ops' realized durations; where the collector's probes exist on a CPU clock,
  each (rank, step, stage, kind) is scaled to its own clock first (``own_clock``: run-queue wait
  that every rank shares is left out, so a busy host flags nobody; a rank's excess wait stays).
- Reference (``references``): peers where they exist, else the expected cost of the rank's own
  work, else only the rank's own history.
- Score of a (rank, kind): ``Σ actions · reference_ms / Σ actions · median_ms`` over the rank's
  stages of that kind (nvidia-resiliency-ext's straggler score: 1 is typical, below 1 slower). The
  rank's score is the lowest of the same sums over its kind families: F, F&B, and the backward (B,
  I and W together). Judging I and W as one keeps work that a stage's place moves between them (the
  first stage has no input gradient to compute: its I is empty and its W does it all) from
  flagging a rank that does its whole backward at normal speed.
- Persistence: the same scores step by step (per-step references); ``persistent`` when more than
  ``persistent_share`` of the steps score below the threshold, ``one-off`` when some but no more
  do, ``none`` otherwise. History-only rows take their per-step scores from the rank's other steps.
- Price (``price``): the replayed step time saved with only that rank's ops at their ideal
  durations (``tracekit.analysis.ideal``: the lower of the own median and this reference).
- Flagged (a straggler): rank score below ``threshold`` (0.75: 33% slower), persistent, and its
  price at least ``min_saving_share`` of the step (5%). One straggler per rank, most costly first,
  named by the kind that puts the most excess time on it.

``SCORE_SCHEMA``, one row per (rank, kind):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| kind | String | action kind / compute op type | never null |
| work | String | place on the micro-batch path (op-table: stage), comma-joined over the rank's stages | never null |
| reference | String | peers, expected or history (the least trusted over the rank's stages) | never null |
| references | Int64 | fewest ranks (peers, expected) or steps (history) behind a stage's reference | never null |
| stages | String | stages the rank runs this kind on, comma-separated | never null |
| actions | Int64 | actions judged | never null |
| median_ms | Float64 | actions-weighted mean of the rank's per-stage medians, ms | never null |
| reference_ms | Float64 | the same over the references, ms | history reference |
| score | Float64 | reference_ms / median_ms | history reference |
| slow_steps | Int64 | steps scoring below the threshold | never null |
| steps | Int64 | steps the rank ran this kind in | never null |
| pattern | String | persistent, one-off or none | never null |
| saving_ms | Float64 | replayed step time saved with this kind of this rank at reference speed | history reference |
| step_ms | Float64 | mean measured step time, ms | never null |
| flagged | Boolean | this is the kind a straggler is named by (its rank flagged, ``RANK_SCHEMA``) | never null |

``RANK_SCHEMA``, one row per judged rank, flagged first, most costly first:

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| rank | Int32 | global rank | never null |
| kind | String | the kind with the most excess time (median over reference, times actions) | never null |
| kind_score | Float64 | that kind's score | never null |
| score | Float64 | the rank's lowest score over its kind families (F, F&B, backward = B, I, W) | never null |
| reference | String | peers, or expected when any of its stages has no peers | never null |
| slow_steps, steps | Int64 | steps in which that family scores below the threshold, steps | never null |
| pattern | String | persistent, one-off or none | never null |
| saving_ms | Float64 | replayed step time saved with the whole rank at reference speed | never null |
| step_ms | Float64 | mean measured step time, ms | never null |
| step_ms_without | Float64 | step_ms - saving_ms | never null |
| flagged | Boolean | score < threshold, persistent, saving_ms >= min_saving_share * step_ms | never null |

``UNJUDGED_SCHEMA``: rank (Int32), reason (String).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.analysis.choices import StragglerConfig as StragglerConfig
from tracekit.analysis.ideal import Ideal, ideal_durations
from tracekit.analysis.references import own_medians, references
from tracekit.analysis.work import empty_stage_work
from tracekit.stragglers.own_clock import on_own_clock
from tracekit.stragglers.price import Pricer, speed_factors
from tracekit.whatif.case import ReplayCase

SCORE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "kind": pl.String(),
    "work": pl.String(),
    "reference": pl.String(),
    "references": pl.Int64(),
    "stages": pl.String(),
    "actions": pl.Int64(),
    "median_ms": pl.Float64(),
    "reference_ms": pl.Float64(),
    "score": pl.Float64(),
    "slow_steps": pl.Int64(),
    "steps": pl.Int64(),
    "pattern": pl.String(),
    "saving_ms": pl.Float64(),
    "step_ms": pl.Float64(),
    "flagged": pl.Boolean(),
}

RANK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "kind": pl.String(),
    "kind_score": pl.Float64(),
    "score": pl.Float64(),
    "reference": pl.String(),
    "slow_steps": pl.Int64(),
    "steps": pl.Int64(),
    "pattern": pl.String(),
    "saving_ms": pl.Float64(),
    "step_ms": pl.Float64(),
    "step_ms_without": pl.Float64(),
    "flagged": pl.Boolean(),
}

UNJUDGED_SCHEMA: dict[str, pl.DataType] = {"rank": pl.Int32(), "reason": pl.String()}

_TRUST = {"peers": 0, "expected": 1, "history": 2}

_FAMILY_OF = {"B": "backward", "I": "backward", "W": "backward"}
"""Kinds judged together for a rank's score: the parts of one backward (others are their own family)."""


@dataclass(frozen=True)
class Stragglers:
    """Straggler scoring of one run."""

    scores: pl.DataFrame
    """``SCORE_SCHEMA``: every (rank, kind)."""
    ranks: pl.DataFrame
    """``RANK_SCHEMA``: every judged rank, flagged ones first, most costly first."""
    unjudged: pl.DataFrame
    """``UNJUDGED_SCHEMA``: ranks that could not be judged, and why."""
    config: StragglerConfig

    @property
    def flagged(self) -> pl.DataFrame:
        """The stragglers: flagged rows of ``ranks``, most costly first."""
        return self.ranks.filter(pl.col("flagged"))


def _pattern(slow: pl.Expr, steps: pl.Expr, config: StragglerConfig) -> pl.Expr:
    return (
        pl.when(slow > steps * config.persistent_share)
        .then(pl.lit("persistent"))
        .when(slow > 0)
        .then(pl.lit("one-off"))
        .otherwise(pl.lit("none"))
    )


def _weighted(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Actions-weighted own and reference durations per ``keys`` (judged rows only for the reference)."""
    judged = pl.col("reference") != "history"
    return frame.group_by(keys).agg(
        (pl.col("median_ms") * pl.col("actions")).sum().alias("own"),
        (pl.col("reference_ms") * pl.col("actions")).filter(judged).sum().alias("ref"),
        (pl.col("median_ms") * pl.col("actions")).filter(judged).sum().alias("own_judged"),
        judged.any().alias("judged"),
    )


def _unjudged(ops: pl.DataFrame, overall: pl.DataFrame, world: list[int], has_work: bool) -> pl.DataFrame:
    present = set(ops["rank"].unique().to_list())
    computing = set(ops.filter(pl.col("compute"))["rank"].unique().to_list())
    judged = set(overall.filter(pl.col("reference") != "history")["rank"].unique().to_list())
    stages = ops["stage"].n_unique()
    rows = []
    for rank in sorted(set(world) | present):
        if rank not in present:
            reason = "no trace: the rank is missing from the capture"
        elif rank not in computing:
            reason = "no compute actions in its trace"
        elif rank in judged:
            continue
        elif stages < 2:
            reason = "one stage: there is no other stage or rank to compare with"
        elif not has_work:
            reason = (
                "no peers, and run.json records no per-stage work to set an expected cost: judged only "
                "against its own steps (one-off slowness)"
            )
        else:
            reason = "no peers, and the other stages' work is unknown: judged only against its own steps"
        rows.append((rank, reason))
    return pl.DataFrame(rows, schema=UNJUDGED_SCHEMA, orient="row")


def score_stragglers(
    case: ReplayCase,
    config: StragglerConfig | None = None,
    stage_work: pl.DataFrame | None = None,
    world_size: int | None = None,
    ideal: Ideal | None = None,
    clock: pl.DataFrame | None = None,
) -> Stragglers:
    """Score every rank of ``case`` against its reference and price it (module docstring).

    ``clock``: ``own_clock.CLOCK_SCHEMA`` factors that put each compute op on its rank's own clock.
    ``ideal`` is the run's robust ideal (``tracekit.analysis.ideal``) of those ops (``case.ops`` on
    the own clock) with ``stage_work``; None: computed here. Its references are the ones judged
    against, and its durations the ones prices replay.
    """
    config = config or StragglerConfig()
    stage_work = stage_work if stage_work is not None else empty_stage_work()
    ops = on_own_clock(case.ops, clock)
    if ideal is None:
        ideal = ideal_durations(ops, "robust", stage_work)
    assert ideal.method == "robust", "stragglers are priced against the robust ideal"
    compute = ops.filter(pl.col("compute"))
    by_step = own_medians(compute, ["step"])
    computing = compute.select("rank", "stage", pl.col("optype").alias("kind"), "work").unique()
    overall = ideal.references.join(computing, on=["rank", "stage", "kind", "work"]).sort(
        "rank", "stage", "kind", "work"
    )
    per_step = references(by_step, stage_work, ["step"], history=by_step)

    pricer = Pricer(case, speed_factors(case, ideal))
    step_ms = float(case.measured_ms().mean())
    threshold = config.threshold

    step_scores = (
        _weighted(per_step.filter(pl.col("reference_ms").is_not_null()), ["rank", "kind", "step"])
        .with_columns((pl.col("ref") / pl.col("own_judged")).alias("s"))
    )
    history_steps = per_step.filter(pl.col("reference") == "history").group_by("rank", "kind", "step").agg(
        ((pl.col("reference_ms") * pl.col("actions")).sum() / (pl.col("median_ms") * pl.col("actions")).sum()).alias(
            "h"
        )
    )
    kind_steps = (
        by_step.select("rank", "kind", "step")
        .unique()
        .join(step_scores.select("rank", "kind", "step", "s"), on=["rank", "kind", "step"], how="left")
        .join(history_steps, on=["rank", "kind", "step"], how="left")
        .group_by("rank", "kind")
        .agg(
            (pl.coalesce("s", "h") < threshold).sum().cast(pl.Int64()).alias("slow_steps"),
            pl.len().cast(pl.Int64()).alias("steps"),
        )
    )
    kinds = (
        overall.with_columns(pl.col("reference").replace_strict(_TRUST, return_dtype=pl.Int64()).alias("trust"))
        .group_by("rank", "kind")
        .agg(
            pl.col("work").unique().sort().str.join(","),
            pl.col("trust").max(),
            pl.col("references").min(),
            pl.col("stage").sort().cast(pl.String()).str.join(",").alias("stages"),
            pl.col("actions").sum(),
            ((pl.col("median_ms") * pl.col("actions")).sum() / pl.col("actions").sum()).alias("median_ms"),
            ((pl.col("reference_ms") * pl.col("actions")).sum() / pl.col("actions").sum()).alias("reference_ms"),
        )
        .with_columns(
            pl.col("trust").replace_strict({v: k for k, v in _TRUST.items()}, return_dtype=pl.String()).alias(
                "reference"
            ),
        )
        .with_columns(
            pl.when(pl.col("reference") == "history").then(None).otherwise(pl.col("reference_ms")).alias(
                "reference_ms"
            )
        )
        .with_columns((pl.col("reference_ms") / pl.col("median_ms")).alias("score"))
        .join(kind_steps, on=["rank", "kind"])
        .with_columns(_pattern(pl.col("slow_steps"), pl.col("steps"), config).alias("pattern"))
        .sort("rank", "kind")
    )

    # Per (rank, family): I and W are one backward, so work a stage's place moves between them
    # (the first stage's I is empty, its W does it all) cancels out.
    family = pl.col("kind").replace_strict(dict(_FAMILY_OF), default=pl.col("kind"), return_dtype=pl.String())
    family_steps = (
        _weighted(per_step.filter(pl.col("reference") != "history").with_columns(family.alias("family")), ["rank", "family", "step"])
        .with_columns((pl.col("ref") / pl.col("own_judged") < threshold).alias("slow"))
        .group_by("rank", "family")
        .agg(pl.col("slow").sum().cast(pl.Int64()).alias("slow_steps"), pl.len().cast(pl.Int64()).alias("steps"))
    )
    judged_kinds = kinds.filter(pl.col("reference") != "history").with_columns(
        ((pl.col("median_ms") - pl.col("reference_ms")) * pl.col("actions")).alias("excess_ms")
    )
    worst = judged_kinds.sort(["excess_ms", "kind"], descending=[True, False]).group_by("rank", maintain_order=True).first()
    lowest = (
        _weighted(overall.with_columns(family.alias("family")), ["rank", "family"])
        .filter(pl.col("judged"))
        .with_columns((pl.col("ref") / pl.col("own_judged")).alias("score"))
        .join(family_steps, on=["rank", "family"])
        .sort(["score", "family"])
        .group_by("rank", maintain_order=True)
        .first()
    )
    rank_rows = (
        lowest.select("rank", "score", "slow_steps", "steps")
        .join(
            overall.group_by("rank").agg(
                pl.when((pl.col("reference") == "peers").all()).then(pl.lit("peers")).otherwise(pl.lit("expected")).alias(
                    "reference"
                )
            ),
            on="rank",
        )
        .join(worst.select("rank", "kind", pl.col("score").alias("kind_score")), on="rank")
        .with_columns(_pattern(pl.col("slow_steps"), pl.col("steps"), config).alias("pattern"))
        .sort("rank")
    )
    # Every (rank, kind) with a reference and every rank, priced in one batch of counterfactuals.
    kind_keys = [
        (rank, kind)
        for rank, kind, reference in kinds.select("rank", "kind", "reference").iter_rows()
        if reference != "history"
    ]
    rank_keys: list[tuple[int, str | None]] = [(rank, None) for rank in rank_rows["rank"].to_list()]
    priced = pricer.rank_savings_ms([*kind_keys, *rank_keys])
    by_kind = dict(zip(kind_keys, priced[: len(kind_keys)]))
    savings = [by_kind.get((rank, kind)) for rank, kind in kinds.select("rank", "kind").iter_rows()]
    scores = kinds.with_columns(
        pl.Series("saving_ms", savings, dtype=pl.Float64()), pl.lit(step_ms).alias("step_ms")
    )
    rank_savings = priced[len(kind_keys) :]
    ranks = (
        rank_rows.with_columns(
            pl.Series("saving_ms", rank_savings, dtype=pl.Float64()),
            pl.lit(step_ms).alias("step_ms"),
        )
        .with_columns(
            (pl.col("step_ms") - pl.col("saving_ms")).alias("step_ms_without"),
            (
                (pl.col("score") < threshold)
                & (pl.col("pattern") == "persistent")
                & (pl.col("saving_ms") >= config.min_saving_share * pl.col("step_ms"))
            ).alias("flagged"),
        )
        .select(list(RANK_SCHEMA))
        .cast(RANK_SCHEMA)  # type: ignore[arg-type]
        # rank breaks ties, so the order is the same on every run.
        .sort(["flagged", "saving_ms", "score", "rank"], descending=[True, True, False, False])
    )
    named = ranks.filter(pl.col("flagged")).select("rank", "kind", pl.lit(True).alias("flagged"))
    scores = (
        scores.join(named, on=["rank", "kind"], how="left")
        .with_columns(pl.col("flagged").fill_null(False))
        .select(list(SCORE_SCHEMA))
        .cast(SCORE_SCHEMA)  # type: ignore[arg-type]
        .sort("rank", "kind")
    )
    world = list(range(world_size)) if world_size is not None else []
    unjudged = _unjudged(case.ops, overall, world, not stage_work.is_empty())
    return Stragglers(scores=scores, ranks=ranks, unjudged=unjudged, config=config)
