"""Cross-rank dependencies of realized actions: which action waits for which, by the one rule.

The realized actions (``tracekit.analysis.realized``) carry no edges; this module finds them with
the one dependency rule of ``tracekit.schedule.dependencies`` (F(s, m) needs F(s-1, m); the
backward of (s, m) needs the backward of (s+1, m), or F(s, m) at the loss; W needs I), where a
micro-batch's path is the stages it ran on in that step and replica (DualPipe's two directions
have paths 0..P-1 and P..2P-1). Producers are found by (step, replica, slot, stage, micro-batch):
a stage may run on any rank of its replica's pipeline, and dependencies never cross replicas.

Clock alignment (``tracekit.analysis.clock``), the replay case (``tracekit.whatif.pipeline``) and
the link latencies (``tracekit.stragglers.links``) read the same edges from here.

Not for: building the replay graph or timing anything.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.errors import TracekitError
from tracekit.schedule import dependencies as rule
from tracekit.schedule.action import KIND_CODES

ACTION_COLUMNS = (
    "rank",
    "replica",
    "step",
    "stage",
    "kind",
    "microbatch",
    "start_ns",
    "end_ns",
    "overlapped",
)
"""Columns of the realized-actions frame this model reads."""

DEPENDENCY_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int32(),
    "replica": pl.Int32(),
    "src_rank": pl.Int32(),
    "src_end_ns": pl.Int64(),
    "dst_rank": pl.Int32(),
    "dst_start_ns": pl.Int64(),
}
"""One row per cross-rank data dependency: the consumer cannot start before the producer ends."""

_KIND_CODE = {kind.value: code for kind, code in rule.KIND_CODE.items()}
_SLOT_KEY = ["step", "replica", "slot", "stage", "microbatch"]
_ACTION_KEY = ["step", "replica", "stage", "kind", "microbatch"]

PIPELINES_HINT = (
    "if these ranks are data-parallel replicas of one pipeline, name the pipeline groups: pass "
    "--pipelines contiguous:P or strided:P (AnalysisConfig.pipelines; docs/api.md, pipeline groups)"
)
"""What a run whose ranks repeat a stage's actions is told to do."""


def with_paths(actions: pl.DataFrame) -> pl.DataFrame:
    """Each action with the first and last stage of its micro-batch's path in its step and replica."""
    spans = actions.group_by("step", "replica", "microbatch").agg(
        pl.col("stage").min().alias("path_first"), pl.col("stage").max().alias("path_last")
    )
    return actions.join(spans, on=["step", "replica", "microbatch"], how="left", maintain_order="left")


_AT_FIRST, _AT_LAST = pl.col("stage") == pl.col("path_first"), pl.col("stage") == pl.col("path_last")
PATH_ROLE = (
    pl.when(_AT_FIRST & _AT_LAST)
    .then(pl.lit("first&last"))
    .when(_AT_FIRST)
    .then(pl.lit("first"))
    .when(_AT_LAST)
    .then(pl.lit("last"))
    .otherwise(pl.lit("middle"))
    .alias("role")
)
"""Where a stage sits on a micro-batch's path: first and last stages do different work (embedding, loss)."""


def numbered_actions(actions: pl.DataFrame, source: str) -> pl.DataFrame:
    """The actions checked (columns, kinds, each action once), ordered by lane and numbered ``row``, with their paths."""
    missing = [c for c in ACTION_COLUMNS if c not in actions.columns]
    if missing:
        raise TracekitError(f"realized actions lack columns {missing}", source)
    if actions.is_empty():
        raise TracekitError("no realized actions to replay", source)
    unknown = actions.filter(~pl.col("kind").is_in(KIND_CODES))
    if not unknown.is_empty():
        raise TracekitError(f"unknown action kind {unknown['kind'][0]!r} (known: {', '.join(KIND_CODES)})", source)
    twice = (
        actions.group_by(_ACTION_KEY)
        .agg(pl.len(), pl.col("rank").unique().sort().alias("ranks"))
        .filter(pl.col("len") > 1)
    )
    if not twice.is_empty():
        kind_order = pl.col("kind").replace_strict(_KIND_CODE, return_dtype=pl.Int64())
        row = twice.sort("step", "replica", "stage", kind_order, "microbatch").row(0, named=True)
        where = f"step {row['step']}" + (f" of replica {row['replica']}" if actions["replica"].max() else "")
        ranks = row["ranks"]
        on = f" (ranks {', '.join(map(str, ranks))})" if len(ranks) > 1 else ""
        hint = f"; {PIPELINES_HINT}" if len(ranks) > 1 else ""
        raise TracekitError(
            f"action {row['stage']}{row['kind']}{row['microbatch']} runs {row['len']} times in {where}{on}: "
            f"cannot tell which one a dependency waits for{hint}",
            source,
        )
    ordered = actions.select(ACTION_COLUMNS).with_row_index("input").sort("step", "rank", "start_ns", "end_ns")
    return with_paths(ordered).with_row_index("row")


def dependency_rows(actions: pl.DataFrame) -> pl.DataFrame:
    """(consumer row, producer row) of every dependency of ``numbered_actions``' rows; producer null when absent."""
    kind = actions["kind"].replace_strict(_KIND_CODE, return_dtype=pl.Int64()).to_numpy()
    stage = actions["stage"].to_numpy().astype(np.int64)
    slot, needed = rule.producers(
        kind, stage, actions["path_first"].to_numpy(), actions["path_last"].to_numpy()
    )
    keys = actions.select("row", "step", "replica", "microbatch")
    wants = keys.with_columns(pl.Series("slot", slot), pl.Series("stage", needed)).filter(
        pl.col("slot") != rule.NO_SLOT
    )
    own = keys.with_columns(pl.Series("slot", rule.own_slots(kind)), pl.Series("stage", stage))
    inputs = own.filter(pl.Series(rule.is_input(kind))).with_columns(pl.lit(rule.INPUT_SLOT, pl.Int64()).alias("slot"))
    producers = pl.concat([own, inputs]).rename({"row": "producer"})
    return (
        wants.rename({"row": "consumer"})
        .join(producers, on=_SLOT_KEY, how="left", maintain_order="left")
        .select("consumer", "producer")
    )


def cross_rank_dependencies(actions: pl.DataFrame, source: str = "realized actions") -> pl.DataFrame:
    """Every dependency whose producer and consumer ran on different ranks (``DEPENDENCY_SCHEMA``)."""
    actions = numbered_actions(actions, source)
    ends = actions.select(pl.col("row").alias("producer"), pl.col("rank").alias("src_rank"), pl.col("end_ns").alias("src_end_ns"))
    starts = actions.select(
        pl.col("row").alias("consumer"),
        "step",
        "replica",
        pl.col("rank").alias("dst_rank"),
        pl.col("start_ns").alias("dst_start_ns"),
    )
    return (
        dependency_rows(actions)
        .drop_nulls("producer")
        .join(ends, on="producer")
        .join(starts, on="consumer")
        .filter(pl.col("src_rank") != pl.col("dst_rank"))
        .select(list(DEPENDENCY_SCHEMA))
        .cast(DEPENDENCY_SCHEMA)  # type: ignore[arg-type]
        .sort(list(DEPENDENCY_SCHEMA))
    )
