"""The dependency model of a realized pipeline schedule (tracekit's Kineto path).

Nodes are the compute actions of ``tracekit.analysis.realized`` (an overlapped F&B pair is one
node: its halves run as one chunk). Edges:

- in-rank: each rank's actions of a step run in their recorded order;
- cross-rank: the one dependency rule of ``tracekit.schedule.dependencies`` (F(s, m) needs
  F(s-1, m); the backward of (s, m) needs the backward of (s+1, m), or F(s, m) at the loss; W
  needs I), where a micro-batch's path is the stages it ran on in that step (DualPipe's two
  directions have paths 0..P-1 and P..2P-1).

- peer waits (``waits_for_peers``, DeepSeek's DualPipe and DualPipeV: ``COMMIT_AND_WAIT_CLASSES``):
  those schedules queue an action's sends until the next action, post them together with the
  receives queued since, and wait for all of them before computing (``_commit_and_wait_comm``). A
  point-to-point send completes only once its receiver has posted the matching receive (gloo's
  unbound buffers and NCCL alike), and a receive may be queued an action ahead of the one that
  reads it. So per transfer P -> C, two more edges: the action after P waits for C's rank to end
  the action before C (the receiver reaching its receive), and the action before C waits for P
  (a receive queued ahead). An edge is added only where the recorded run is consistent with it
  (its source ended before its destination started), so it never invents a wait the run did not
  allow; where the receive was not queued ahead, the second edge is slack in the recorded run
  and may bind in a faster counterfactual, which errs towards a smaller saving.

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

Not for: finding the dependencies (``tracekit.analysis.dependencies``, which clock alignment reads too).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.analysis.dependencies import PATH_ROLE, dependency_rows, numbered_actions
from tracekit.errors import TracekitError
from tracekit.whatif.case import MEASURED_SCHEMA, OPS_SCHEMA, ReplayCase
from tracekit.whatif.graph import GraphCycleError, dependency_graph

PAIR_KIND = "F&B"
"""Op type of an overlapped forward/backward pair."""

COMMIT_AND_WAIT_CLASSES = frozenset({"DualPipe", "DualPipeV"})
"""Schedule classes (the manifest's ``class``) whose actions wait for their peers' sends and
receives together: DeepSeek's ``dualpipe`` package (module docstring, peer waits)."""


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


def pipeline_case(
    actions: pl.DataFrame, source: str, waits_for_peers: bool = False
) -> tuple[ReplayCase, tuple[str, ...]]:
    """The realized schedule as a replay case, and warnings (dependencies whose producer is absent)."""
    case, warnings, _ = pipeline_case_nodes(actions, source, waits_for_peers)
    return case, warnings


def _peer_wait_edges(
    lanes: np.ndarray, start: np.ndarray, end: np.ndarray, producer: np.ndarray, consumer: np.ndarray
) -> np.ndarray:
    """The peer-wait edges (module docstring) of the cross-rank transfers ``producer`` -> ``consumer``.

    ``lanes``: (step, rank) per node, nodes in lane order; ``start``, ``end``: per node, ns. Per
    transfer: the consumer's previous node -> the producer's next node, and the producer -> the
    consumer's previous node, each where both ends exist in the same step and the recorded run
    kept it (source ended before destination started).
    """
    cross = lanes[producer, 1] != lanes[consumer, 1]
    producer, consumer = producer[cross], consumer[cross]
    after, before = producer + 1, consumer - 1
    exists = (after < lanes.shape[0]) & (before >= 0)
    after, before, producer, consumer = after[exists], before[exists], producer[exists], consumer[exists]
    sender_next = (lanes[after] == lanes[producer]).all(axis=1)
    receiver_previous = (lanes[before] == lanes[consumer]).all(axis=1)
    posted = receiver_previous & sender_next & (end[before] <= start[after])
    ahead = receiver_previous & (end[producer] <= start[before])
    return np.concatenate(
        [np.stack([before[posted], after[posted]], axis=1), np.stack([producer[ahead], before[ahead]], axis=1)]
    )


def pipeline_case_nodes(
    actions: pl.DataFrame, source: str, waits_for_peers: bool = False
) -> tuple[ReplayCase, tuple[str, ...], np.ndarray]:
    """``pipeline_case``, and per row of ``actions`` (in its order) its node: its op's row in ``ops``.

    ``waits_for_peers``: add the peer-wait edges (module docstring) of a ``COMMIT_AND_WAIT_CLASSES`` schedule.

    A node spans its rows: it starts at their earliest start and ends at their latest end.
    """
    given, actions = actions, numbered_actions(actions, source)
    rows = actions.with_columns(
        pl.Series("node", _nodes(actions, source)), pl.col("kind").eq("F").alias("is_forward"), PATH_ROLE
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
    dependencies = dependency_rows(actions)
    absent = dependencies["producer"].null_count()
    found = dependencies.drop_nulls("producer")
    producer = row_node[found["producer"].to_numpy()]
    consumer = row_node[found["consumer"].to_numpy()]
    distinct = producer != consumer
    parts = [np.stack([follows - 1, follows], axis=1), np.stack([producer[distinct], consumer[distinct]], axis=1)]
    if waits_for_peers:
        start, end = nodes["start_ns"].to_numpy(), nodes["end_ns"].to_numpy()
        parts.append(_peer_wait_edges(lanes, start, end, producer[distinct], consumer[distinct]))
    edges = np.unique(np.concatenate(parts), axis=0)
    gaps_ns = _gaps_ns(nodes, edges)
    labels = [
        f"step {step} rank {rank} {what}" for step, rank, what in nodes.select("step", "rank", "what").iter_rows()
    ]
    try:
        graph = dependency_graph(labels, edges[:, 0], edges[:, 1])
    except GraphCycleError as error:
        if waits_for_peers:  # a peer wait against a transfer the clocks put backwards: replay without them
            case, warnings, node_of_input = pipeline_case_nodes(given, source)
            note = f"{source}: replayed without the schedule's peer waits, which close a cycle with clock skew: {error}"
            return case, (*warnings, note), node_of_input
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
