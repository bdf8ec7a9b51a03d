"""The dependency model of a realized pipeline schedule (tracekit's Kineto path).

Nodes are the compute actions of ``tracekit.analysis.realized`` (an overlapped F&B pair is one
node: its halves run as one chunk). Edges:

- in-rank: each rank's actions of a step run in their recorded order;
- cross-rank: the one dependency rule of ``tracekit.schedule.dependencies`` (F(s, m) needs
  F(s-1, m); the backward of (s, m) needs the backward of (s+1, m), or F(s, m) at the loss; W
  needs I), where a micro-batch's path is the stages it ran on in that step (DualPipe's two
  directions have paths 0..P-1 and P..2P-1).

- peer waits (the run's ``schedule_class`` one of ``COMMIT_AND_WAIT_CLASSES``: DeepSeek's DualPipe
  and DualPipeV): those schedules queue sends and receives and post them together at the next
  ``_commit_and_wait_comm``, which every action starts with and which waits for all of them. A
  point-to-point send completes only once its receiver has posted the matching receive (gloo's
  unbound buffers and NCCL alike), and a receive only once its sender has posted. Which commit
  posts a transfer is the schedule's program, not the action order: most sends leave at the
  sender's next action, some only at the one after (DualPipe's step 2 queues a forward's send
  behind the next forward), and some receives are posted an action ahead
  (``tracekit.whatif.commit_and_wait`` replays the source's ``step``). So per transfer, with S
  the sender's action whose commit posts the send and Q the receiver's whose commit posts the
  receive: Q waits for the action before S (the sender reaching its commit), and S for the action
  before Q (the receiver reaching its own). Each lane is matched to its rank's program action by
  action; a run the program does not hold (a rank that ran other actions) replays without peer
  waits, with a warning that says why.

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
from tracekit.whatif.commit_and_wait import ActionKey, RankProgram, commit_program
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
    actions: pl.DataFrame, source: str, schedule_class: str | None = None
) -> tuple[ReplayCase, tuple[str, ...]]:
    """The realized schedule as a replay case, and warnings (dependencies whose producer is absent)."""
    case, warnings, _ = pipeline_case_nodes(actions, source, schedule_class)
    return case, warnings


def _commit_edges(
    actions: pl.DataFrame, row_node: np.ndarray, producer: np.ndarray, consumer: np.ndarray, v_shaped: bool
) -> tuple[np.ndarray, str | None]:
    """The peer-wait edges (module docstring) of the cross-rank transfers ``producer`` -> ``consumer`` (rows).

    ``actions``: ``numbered_actions``' rows, ``row_node`` their nodes. Each lane is matched, action
    by action, to its rank's program (``commit_program``: DualPipe's, or DualPipeV's when
    ``v_shaped``); a run whose lanes or transfers the program does not hold gets no edges and
    the reason why instead.
    """
    no_edges = np.empty((0, 2), dtype=np.int64)
    lanes = actions.select(
        "step",
        "replica",
        "rank",
        pl.col("kind").replace({"I": "B"}).alias("what"),  # the program's B: a backward, full or for inputs
        "stage",
        "microbatch",
    ).with_columns(
        pl.col("stage").min().over("replica", "rank").alias("pp_rank"),
        ((pl.col("stage").max().over("replica") + 1) // 2).alias("pp_size"),
        pl.col("microbatch").n_unique().over("step", "replica").alias("chunks"),
    )
    keys = list(zip(lanes["what"].to_list(), lanes["stage"].to_list(), lanes["microbatch"].to_list()))
    lane_of = list(zip(lanes["step"].to_list(), lanes["rank"].to_list()))
    programs: dict[tuple[int, int], tuple[RankProgram, ...]] = {}
    lane_program: dict[tuple[int, int], RankProgram] = {}
    lane_nodes: dict[tuple[int, int], dict[ActionKey, int]] = {}
    for (step, rank, pp_rank, pp_size, chunks), rows in lanes.with_row_index("at").group_by(
        "step", "rank", "pp_rank", "pp_size", "chunks", maintain_order=True
    ):
        shape = (pp_size, chunks)
        if shape not in programs:
            even = v_shaped or (pp_size % 2 == 0 and chunks % 2 == 0)
            runs = pp_size >= 1 and chunks >= 2 * pp_size and even
            if not runs:
                return no_edges, f"{pp_size} ranks and {chunks} micro-batches are not a step it runs"
            programs[shape] = commit_program(pp_size, chunks, v_shaped)
        if pp_rank >= pp_size:
            return no_edges, f"rank {rank} runs stage {pp_rank}, past its {pp_size} pipeline ranks"
        program = programs[shape][pp_rank]
        at = rows["at"].to_list()
        nodes = {keys[index]: int(row_node[index]) for index in at}
        if set(nodes) != set(program.actions) or len(at) != len(program.actions):
            return no_edges, f"step {step} rank {rank} did not run its program's actions"
        lane_program[(step, rank)] = program
        lane_nodes[(step, rank)] = nodes
    edges: list[tuple[int, int]] = []
    for made, used in zip(producer.tolist(), consumer.tolist()):
        sender, receiver = lane_of[made], lane_of[used]
        if sender[1] == receiver[1]:
            continue
        sent, received = lane_program[sender], lane_program[receiver]
        at_send, at_receive = sent.sends.get(keys[made]), received.receives.get(keys[used])
        if at_send is None or at_receive is None:
            return no_edges, f"its program has no transfer {keys[made]} -> {keys[used]}"
        send_nodes, receive_nodes = lane_nodes[sender], lane_nodes[receiver]
        # The receive completes once the sender posts (after the action before its commit) ...
        edges.append((send_nodes[sent.actions[at_send - 1]], receive_nodes[received.actions[at_receive]]))
        # ... and the send once the receiver posts (after the action before its own commit).
        if at_send < len(sent.actions) and at_receive > 0:
            edges.append((receive_nodes[received.actions[at_receive - 1]], send_nodes[sent.actions[at_send]]))
    return np.asarray(edges, dtype=np.int64).reshape(-1, 2), None


def pipeline_case_nodes(
    actions: pl.DataFrame, source: str, schedule_class: str | None = None
) -> tuple[ReplayCase, tuple[str, ...], np.ndarray]:
    """``pipeline_case``, and per row of ``actions`` (in its order) its node: its op's row in ``ops``.

    ``schedule_class``: the run's (the manifest's ``class``); one of ``COMMIT_AND_WAIT_CLASSES``
    adds its peer-wait edges (module docstring).

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
    waits_for_peers = schedule_class in COMMIT_AND_WAIT_CLASSES
    peer_note: tuple[str, ...] = ()
    if waits_for_peers:
        peer_edges, unmatched = _commit_edges(
            actions,
            row_node,
            found["producer"].to_numpy(),
            found["consumer"].to_numpy(),
            v_shaped=schedule_class == "DualPipeV",
        )
        parts.append(peer_edges)
        if unmatched is not None:
            peer_note = (f"{source}: replayed without {schedule_class}'s peer waits: {unmatched}",)
    edges = np.unique(np.concatenate(parts), axis=0)
    gaps_ns = _gaps_ns(nodes, edges)
    labels = [
        f"step {step} rank {rank} {what}" for step, rank, what in nodes.select("step", "rank", "what").iter_rows()
    ]
    try:
        graph = dependency_graph(labels, edges[:, 0], edges[:, 1])
    except GraphCycleError as error:
        if waits_for_peers:  # the program's waits against the recorded order: replay without them, loudly
            case, warnings, node_of_input = pipeline_case_nodes(given, source)
            note = f"{source}: replayed without {schedule_class}'s peer waits, which close a cycle: {error}"
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
    ) + peer_note
    node_of_input = np.empty(actions.height, dtype=np.int64)
    node_of_input[rows["input"].to_numpy()] = row_node
    return ReplayCase(graph=graph, ops=ops, measured=measured, source="kineto"), warnings, node_of_input
