"""The dependency model of a realized pipeline schedule (tracekit's Kineto path).

Nodes are the compute actions of ``tracekit.analysis.realized`` (an overlapped F&B pair is one
node: its halves run as one chunk). Edges:

- in-rank: each rank's actions of a step run in their recorded order;
- cross-rank: the one dependency rule of ``tracekit.schedule.dependencies`` (F(s, m) needs
  F(s-1, m); the backward of (s, m) needs the backward of (s+1, m), or F(s, m) at the loss; W
  needs I), where a micro-batch's path is the stages it ran on in that step (DualPipe's two
  directions have paths 0..P-1 and P..2P-1).

Producers are found by (step, replica, slot, stage, micro-batch), so a stage may run on any rank
of its replica's pipeline (``replica``: the data-parallel replica, ``tracekit.analysis.pipelines``):
dependencies never cross replicas. Steps are independent subgraphs, each replayed from 0; the
replicas of a step are parallel parts of its subgraph, and the step ends when the last of them
does (the data-parallel all-reduce joins them). An op's ``dp_rank`` is its replica. The realized
frame carries no communication, so the replay has no sync groups: replayed with their durations,
the ops give compute and dependencies only, and the gap to the measured step span is
communication, launch gaps and everything unlabelled. Each op carries its share of that gap as
``gap_ms`` (how long after it was ready it started); replayed as duration plus gap
(``ReplayCase.occupied_ms``), the ops rerun the recorded steps.

Not for: clock alignment (``tracekit.whatif.clock`` uses ``cross_rank_dependencies``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.errors import TracekitError
from tracekit.schedule import dependencies as rule
from tracekit.schedule.action import KIND_CODES
from tracekit.whatif.case import MEASURED_SCHEMA, OPS_SCHEMA, ReplayCase
from tracekit.whatif.graph import GraphCycleError, dependency_graph

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

PAIR_KIND = "F&B"
"""Op type of an overlapped forward/backward pair."""

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


def _with_paths(actions: pl.DataFrame) -> pl.DataFrame:
    """Each action with the first and last stage of its micro-batch's path in its step and replica."""
    spans = actions.group_by("step", "replica", "microbatch").agg(
        pl.col("stage").min().alias("path_first"), pl.col("stage").max().alias("path_last")
    )
    return actions.join(spans, on=["step", "replica", "microbatch"], how="left", maintain_order="left")


_AT_FIRST, _AT_LAST = pl.col("stage") == pl.col("path_first"), pl.col("stage") == pl.col("path_last")
_ROLE = (
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


def _check(actions: pl.DataFrame, source: str) -> pl.DataFrame:
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
    return _with_paths(ordered).with_row_index("row")


def _dependencies(actions: pl.DataFrame) -> pl.DataFrame:
    """(consumer row, producer row) of every dependency of ``_check``'s rows; producer null when absent."""
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
    actions = _check(actions, source)
    ends = actions.select(pl.col("row").alias("producer"), pl.col("rank").alias("src_rank"), pl.col("end_ns").alias("src_end_ns"))
    starts = actions.select(
        pl.col("row").alias("consumer"),
        "step",
        "replica",
        pl.col("rank").alias("dst_rank"),
        pl.col("start_ns").alias("dst_start_ns"),
    )
    return (
        _dependencies(actions)
        .drop_nulls("producer")
        .join(ends, on="producer")
        .join(starts, on="consumer")
        .filter(pl.col("src_rank") != pl.col("dst_rank"))
        .select(list(DEPENDENCY_SCHEMA))
        .cast(DEPENDENCY_SCHEMA)  # type: ignore[arg-type]
        .sort(list(DEPENDENCY_SCHEMA))
    )


def _nodes(actions: pl.DataFrame, source: str) -> np.ndarray:
    """Each row's node: one per action, one per overlapped F&B pair (two consecutive overlapped rows of a lane)."""
    node = np.empty(actions.height, dtype=np.int64)
    count = 0
    for (_step, rank), rows in actions.group_by("step", "rank", maintain_order=True):
        pending: dict | None = None
        for row in rows.select("row", "stage", "kind", "microbatch", "overlapped").iter_rows(named=True):
            if not row["overlapped"]:
                node[row["row"]] = count
                count += 1
                continue
            if pending is None:
                pending = row
                continue
            if (pending["kind"] == "F") == (row["kind"] == "F"):
                raise TracekitError(
                    f"rank {rank}: overlapped actions {pending['stage']}{pending['kind']}{pending['microbatch']} and "
                    f"{row['stage']}{row['kind']}{row['microbatch']} follow each other but are not a forward and a "
                    "backward",
                    source,
                )
            node[[pending["row"], row["row"]]] = count
            count += 1
            pending = None
        if pending is not None:
            raise TracekitError(
                f"rank {rank}: overlapped action {pending['stage']}{pending['kind']}{pending['microbatch']} has no other half",
                source,
            )
    return node


def _gaps_ns(nodes: pl.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Per node: how long after it was ready it started (``OPS_SCHEMA``'s ``gap_ms``), ns.

    Ready: every node it depends on (``edges``: its rank's previous node, its producers) has
    ended; a node that depends on none is ready when its step starts (its earliest action).
    Negative when the node started before: an overlapped pair's backward half waits for its
    input inside the pair, or the ranks' clocks disagree by more than the transfer took.
    """
    start, end = nodes["start_ns"].to_numpy(), nodes["end_ns"].to_numpy()
    ready = nodes.select(pl.col("start_ns").min().over("step")).to_series().to_numpy().copy()
    np.maximum.at(ready, edges[:, 1], end[edges[:, 0]])
    return start - ready


def pipeline_case(actions: pl.DataFrame, source: str) -> tuple[ReplayCase, tuple[str, ...]]:
    """The realized schedule as a replay case, and warnings (dependencies whose producer is absent)."""
    case, warnings, _ = pipeline_case_nodes(actions, source)
    return case, warnings


def pipeline_case_nodes(
    actions: pl.DataFrame, source: str
) -> tuple[ReplayCase, tuple[str, ...], np.ndarray]:
    """``pipeline_case``, and per row of ``actions`` (in its order) its node: its op's row in ``ops``.

    A node spans its rows: it starts at their earliest start and ends at their latest end.
    """
    actions = _check(actions, source)
    rows = actions.with_columns(
        pl.Series("node", _nodes(actions, source)), pl.col("kind").eq("F").alias("is_forward"), _ROLE
    )
    # One row per node, its forward half first: the node's stage and role are its forward's.
    nodes = (
        rows.sort("node", pl.col("is_forward").not_())
        .group_by("node", maintain_order=True)
        .agg(
            pl.col("step", "rank", "replica", "stage").first(),
            pl.col("kind").first(),
            pl.len().alias("halves"),
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            pl.col("role").str.join("/").alias("work"),
            (pl.col("stage").cast(pl.String()) + pl.col("kind") + pl.col("microbatch").cast(pl.String()))
            .str.join(";")
            .alias("what"),
        )
        .sort("node")
    )
    row_node = rows["node"].to_numpy()
    lanes = nodes.select("step", "rank").to_numpy()
    follows = np.flatnonzero((lanes[1:] == lanes[:-1]).all(axis=1)) + 1
    dependencies = _dependencies(actions)
    absent = dependencies["producer"].null_count()
    found = dependencies.drop_nulls("producer")
    producer = row_node[found["producer"].to_numpy()]
    consumer = row_node[found["consumer"].to_numpy()]
    distinct = producer != consumer
    edges = np.unique(
        np.concatenate([np.stack([follows - 1, follows], axis=1), np.stack([producer[distinct], consumer[distinct]], axis=1)]),
        axis=0,
    )
    gaps_ns = _gaps_ns(nodes, edges)
    labels = [
        f"step {step} rank {rank} {what}" for step, rank, what in nodes.select("step", "rank", "what").iter_rows()
    ]
    try:
        graph = dependency_graph(labels, edges[:, 0], edges[:, 1])
    except GraphCycleError as error:
        raise TracekitError(f"realized order contradicts the pipeline dependencies: {error}", source) from None
    ops = (
        nodes.select(
            pl.col("node").cast(pl.Int32()),
            "step",
            "stage",
            "rank",
            "replica",
            pl.when(pl.col("halves") == 2).then(pl.lit(PAIR_KIND)).otherwise(pl.col("kind")).alias("optype"),
            "work",
            # numpy divides exactly; polars multiplies by the reciprocal, off by an ulp now and then
            pl.Series("duration_ms", (nodes["end_ns"].to_numpy() - nodes["start_ns"].to_numpy()) / 1e6),
            pl.Series("gap_ms", gaps_ns / 1e6),
        )
        .with_columns(
            pl.lit(0, pl.Int32()).alias("slot"),
            pl.lit(0, pl.Int32()).alias("dp"),
            pl.col("replica").alias("dp_rank"),
            pl.col("optype").alias("attribution_type"),
            pl.lit("mean").alias("ideal_stat"),
            pl.lit(True).alias("compute"),
        )
        .select(list(OPS_SCHEMA))
        .cast(OPS_SCHEMA)  # type: ignore[arg-type]
    )
    measured = (
        actions.group_by("step")
        .agg(((pl.col("end_ns").max() - pl.col("start_ns").min()) / 1e6).alias("measured_ms"))
        .sort("step")
        .cast(MEASURED_SCHEMA)  # type: ignore[arg-type]
    )
    warnings = (
        (
            f"{source}: {absent} dependencies wait for actions absent from the trace (missing ranks?); replayed without them",
        )
        if absent
        else ()
    )
    node_of_input = np.empty(actions.height, dtype=np.int64)
    node_of_input[rows["input"].to_numpy()] = row_node
    return ReplayCase(graph=graph, ops=ops, measured=measured, source="kineto"), warnings, node_of_input
