"""The dependency model of one Megatron-LM training step recorded in an op-table.

This follows the model of Lin et al. (OSDI 2025, §4.1) as their artifact applies it, rewritten here:
the graph is built once from one model-parallel group (data-parallel rank 0) of the first step, and
replayed for every step and data-parallel rank, which share it.

In-rank edges, per pipeline stage:

- compute (forward-compute, backward-compute) runs in its recorded order;
- each p2p op type (forward-send, forward-recv, backward-send, backward-recv) is one stream in
  recorded order;
- a send waits for the compute whose output it carries; a recv waits for the previous compute of
  its kind and gates the compute that consumes it (sends/recvs that happen before the first or
  after the last compute of their kind are launched-but-empty ops and match no compute);
- the first backward-recv/-send wait for the compute two places before the first backward;
- with data parallelism, params-all-gather and grads-reduce-scatter are one stream, and the first
  forward of a model chunk waits for that chunk's params-all-gather;
- after the last compute: gc, layernorm-grads-all-reduce, embedding-grads-all-reduce (first and
  last stage), grads-reduce-scatter, optimizer-clip-main-grad, optimizer, in that order.

Sync groups (cross-rank edges): matched p2p send/recv pairs (the k-th live op of a stream pairs with
the k-th live op of its peer stream on the neighbouring stage); params-all-gather and
grads-reduce-scatter across data-parallel ranks; embedding-grads-all-reduce across the first and
last stage; optimizer-clip-main-grad across all stages and data-parallel ranks. Layernorm grads
all-reduce is a tensor-parallel collective inside one worker's group and runs as a plain op.

Transfer time of a synchronizing op: its recorded end minus the latest start in its group
(negative values beyond ``clamp_s`` are clock noise and become 0).

Not for: other frameworks' step structure, or interleaved pipelines with overlapped DP
communication (``separate-grads-all-reduce``), which the reader refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from tracekit.errors import TracekitError
from tracekit.whatif.case import MEASURED_SCHEMA, OPS_SCHEMA, ReplayCase
from tracekit.whatif.graph import GraphBuilder, GraphCycleError
from tracekit.whatif.optable import JobMeta

COMPUTE = ("forward-compute", "backward-compute")
P2P_PEER: dict[str, tuple[str, int]] = {
    "forward-send": ("forward-recv", +1),
    "forward-recv": ("forward-send", -1),
    "backward-send": ("backward-recv", -1),
    "backward-recv": ("backward-send", +1),
}
"""P2P op type -> (the op type it pairs with, stage offset of the peer)."""

IDEAL_BY_MEDIAN = frozenset(
    [
        *P2P_PEER,
        "params-all-gather",
        "grads-reduce-scatter",
        "layernorm-grads-all-reduce",
        "embedding-grads-all-reduce",
        "optimizer-clip-main-grad",
    ]
)
"""Communication op types: their typical duration is the median (artifact); compute takes the mean."""

ATTRIBUTION_TYPE = {
    "forward-send": "forward-pp-comm",
    "forward-recv": "forward-pp-comm",
    "backward-send": "backward-pp-comm",
    "backward-recv": "backward-pp-comm",
}
"""Op types attributed together (the two ends of a pipeline transfer); others are their own group."""

_POST_COMPUTE = ("gc", "layernorm-grads-all-reduce", "embedding-grads-all-reduce")
_STEP_END = ("optimizer-clip-main-grad", "optimizer")


@dataclass(frozen=True)
class MegatronModelConfig:
    """Tolerances of the op-table dependency model."""

    match_tolerance_s: float = 5e-5
    """Slack when deciding a send/recv happens before/after all compute of its kind (artifact: 5e-5 s)."""
    clamp_s: float = 1e-2
    """Transfer times below -clamp_s are set to 0 (artifact: 10 ms)."""

    def __post_init__(self) -> None:
        if self.match_tolerance_s < 0 or self.clamp_s < 0:
            raise ValueError("tolerances must be >= 0")


class _Op(NamedTuple):
    optype: str
    seq_id: int
    stage: int
    start: float
    end: float
    mc: int
    gmc: int


def _label(op: _Op) -> str:
    return f"{op.optype}_{op.seq_id}_{op.stage}"


def _template(table: pl.DataFrame) -> dict[int, list[_Op]]:
    """Ops of data-parallel rank 0 in the first step, per stage, in recorded order."""
    first = table.filter((pl.col("step") == pl.col("step").min()) & (pl.col("dp_rank") == 0))
    first = first.with_columns((pl.col("start_ts") + pl.col("duration")).alias("end_ts")).sort(
        "start_ts", "seq_id", "optype"
    )
    stages: dict[int, list[_Op]] = {}
    for row in first.iter_rows(named=True):
        op = _Op(
            row["optype"], row["seq_id"], row["stage"], row["start_ts"], row["end_ts"], row["mc"], row["gmc"]
        )
        stages.setdefault(op.stage, []).append(op)
    return stages


class _Model:
    """Builds the graph stage by stage; holds the p2p bookkeeping the pairing needs."""

    def __init__(self, stages: dict[int, list[_Op]], meta: JobMeta, config: MegatronModelConfig, source: str):
        self.stages, self.meta, self.config, self.source = stages, meta, config, source
        self.pp = max(stages) + 1
        self.chunks = 1 + max(
            (op.mc for ops in stages.values() for op in ops if op.optype in COMPUTE), default=0
        )
        self.builder = GraphBuilder()
        self.live_p2p: dict[tuple[str, int], list[int]] = {}
        """(p2p op type, stage) -> nodes of live (non-empty) transfers, in stream order."""
        self.empty_p2p: list[int] = []

    def fail(self, message: str) -> TracekitError:
        return TracekitError(f"op-table does not fit the Megatron step model: {message}", self.source)

    def node(self, op: _Op) -> int:
        return self.builder.node(_label(op))

    def build(self) -> None:
        for stage, ops in sorted(self.stages.items()):
            self._stage(stage, ops)
        self._pair_p2p()
        self._collectives()

    def _stage(self, stage: int, ops: list[_Op]) -> None:
        b = self.builder
        by_type: dict[str, list[_Op]] = {}
        for op in ops:
            by_type.setdefault(op.optype, []).append(op)
            self.node(op)
        compute = [op for op in ops if op.optype in COMPUTE]
        if not compute:
            raise self.fail(f"stage {stage} has no compute ops")
        b.chain([self.node(op) for op in compute])
        for optype in P2P_PEER:
            b.chain([self.node(op) for op in by_type.get(optype, [])])
        for kind in ("forward", "backward"):
            self._match_p2p(stage, kind, by_type)
        first_backward = next(i for i, op in enumerate(compute) if op.optype == "backward-compute")
        if first_backward >= 2:
            for optype in ("backward-recv", "backward-send"):
                for op in by_type.get(optype, []):
                    if op.seq_id == 0:
                        b.edge(self.node(compute[first_backward - 2]), self.node(op))
        if self.meta.uses_dp:
            dp_stream = [op for op in ops if op.optype in ("params-all-gather", "grads-reduce-scatter")]
            b.chain([self.node(op) for op in dp_stream])
            gathered: set[int] = set()
            for gather in sorted(by_type.get("params-all-gather", []), key=lambda op: -op.seq_id):
                if gather.mc in gathered:
                    continue
                gathered.add(gather.mc)
                forwards = [op for op in compute if op.optype == "forward-compute" and op.mc == gather.mc]
                if forwards:
                    b.edge(self.node(gather), self.node(forwards[0]))
        last_compute = max(compute, key=lambda op: op.end)
        tail = [op for name in _POST_COMPUTE for op in by_type.get(name, [])]
        if self.meta.uses_dp:
            tail += sorted(by_type.get("grads-reduce-scatter", []), key=lambda op: op.seq_id)
        tail += [op for name in _STEP_END for op in by_type.get(name, [])]
        b.chain([self.node(last_compute)] + [self.node(op) for op in tail])

    def _match_p2p(self, stage: int, kind: str, by_type: dict[str, list[_Op]]) -> None:
        """Tie each send/recv of ``kind`` to the compute it carries or feeds (see module docstring)."""
        b, eps = self.builder, self.config.match_tolerance_s
        compute = by_type.get(f"{kind}-compute", [])
        if not compute:
            return
        last_start = max(op.start for op in compute)
        first_end = min(op.end for op in compute)
        for direction in ("send", "recv"):
            optype = f"{kind}-{direction}"
            stream = by_type.get(optype, [])
            if direction == "recv":
                live = [op for op in stream if op.start <= last_start + eps]
            else:
                live = [op for op in stream if op.end >= first_end - eps]
            self.empty_p2p += [self.node(op) for op in stream if op not in live]
            offset = 0
            if len(live) != len(compute):
                if stage not in (0, self.pp - 1) or len(live) not in (0, len(compute) - 1):
                    raise self.fail(
                        f"stage {stage} has {len(live)} {optype} ops for {len(compute)} {kind} computes"
                    )
                offset = 1 if direction == "recv" and live else 0
            _, delta = P2P_PEER[optype]
            for index, op in enumerate(live):
                matched = compute[index + offset]
                peer_chunk = matched.gmc + delta
                if direction == "send":
                    b.edge(self.node(matched), self.node(op))
                else:
                    b.edge(self.node(op), self.node(matched))
                    if index + offset >= 1:
                        b.edge(self.node(compute[index + offset - 1]), self.node(op))
                if 0 <= peer_chunk < self.chunks * self.pp:
                    self.live_p2p.setdefault((optype, stage), []).append(self.node(op))
                else:  # the first/last model chunk: nothing to exchange
                    self.empty_p2p.append(self.node(op))

    def _pair_p2p(self) -> None:
        b = self.builder
        for (optype, stage), nodes in sorted(self.live_p2p.items()):
            if not optype.endswith("send"):
                continue
            peer_type, delta = P2P_PEER[optype]
            peers = self.live_p2p.get((peer_type, (stage + delta) % self.pp), [])
            if len(peers) != len(nodes):
                raise self.fail(
                    f"{len(nodes)} {optype} on stage {stage} but {len(peers)} matching {peer_type}"
                )
            for send, recv in zip(nodes, peers):
                b.group([send, recv])
        for (optype, stage), nodes in self.live_p2p.items():
            if optype.endswith("recv"):
                peer_type, delta = P2P_PEER[optype]
                if len(self.live_p2p.get((peer_type, (stage + delta) % self.pp), [])) != len(nodes):
                    raise self.fail(f"{optype} on stage {stage} has no matching {peer_type}")
        for node in self.empty_p2p:
            b.group([node])

    def _collectives(self) -> None:
        b = self.builder
        all_ops = [op for ops in self.stages.values() for op in ops]
        if self.meta.uses_dp:
            for op in all_ops:
                if op.optype in ("params-all-gather", "grads-reduce-scatter"):
                    b.group([self.node(op)], across_dp=True)
        ends = {0, self.pp - 1}
        embedding = [
            self.node(op) for op in all_ops if op.optype == "embedding-grads-all-reduce" and op.stage in ends
        ]
        if embedding:
            b.group(embedding)
        clip = [self.node(op) for op in all_ops if op.optype == "optimizer-clip-main-grad"]
        if clip:
            b.group(clip, across_dp=True)


def megatron_case(
    table: pl.DataFrame, meta: JobMeta, source: str, config: MegatronModelConfig | None = None
) -> ReplayCase:
    """The op-table as a replay case; TracekitError when it does not fit the step model."""
    config = config or MegatronModelConfig()
    stages = _template(table)
    if sorted(stages) != list(range(meta.pp_size)):
        raise TracekitError(f"op-table stages {sorted(stages)} do not match pp_size {meta.pp_size}", source)
    model = _Model(stages, meta, config, source)
    try:
        model.build()
        graph = model.builder.build()
    except GraphCycleError as error:
        raise model.fail(str(error)) from None
    index = pl.DataFrame(
        {
            "optype": [label.rsplit("_", 2)[0] for label in graph.labels],
            "seq_id": [int(label.rsplit("_", 2)[1]) for label in graph.labels],
            "stage": [int(label.rsplit("_", 2)[2]) for label in graph.labels],
            "node": list(range(graph.size)),
        },
        schema={"optype": pl.String(), "seq_id": pl.Int32(), "stage": pl.Int32(), "node": pl.Int32()},
    )
    steps = table["step"].unique().sort()
    dp_ranks = table["dp_rank"].unique().sort()
    rows = (
        table.join(index, on=["optype", "seq_id", "stage"], how="left")
        .with_columns(
            pl.col("step").rank("dense").cast(pl.Int32()).sub(1).alias("slot"),
            pl.col("dp_rank").rank("dense").cast(pl.Int32()).sub(1).alias("dp"),
            (pl.col("start_ts") - pl.col("start_ts").min().over("step")).alias("start_s"),
        )
        .with_columns((pl.col("start_s") + pl.col("duration")).alias("end_s"))
    )
    stray = rows.filter(pl.col("node").is_null())
    if not stray.is_empty():
        first = stray.row(0, named=True)
        raise TracekitError(
            f"{stray.height} ops absent from step {steps[0]} of dp rank 0, e.g. {first['optype']} "
            f"#{first['seq_id']} on stage {first['stage']} (step {first['step']}): steps differ in structure",
            source,
        )
    expected = graph.size * steps.len() * dp_ranks.len()
    if rows.select("node", "slot", "dp").n_unique() != rows.height or rows.height != expected:
        raise TracekitError(
            f"{rows.height} ops where every step and dp rank should repeat the same {graph.size}: "
            "some ops are missing or recorded twice",
            source,
        )
    case_shape = (graph.size, steps.len(), dp_ranks.len())
    cells = tuple(rows[c].to_numpy().astype(np.intp) for c in ("node", "slot", "dp"))
    start = np.zeros(case_shape)
    end = np.zeros(case_shape)
    start[cells] = rows["start_s"].to_numpy()
    end[cells] = rows["end_s"].to_numpy()
    transfer = end.copy()
    grouped = np.zeros(graph.size, dtype=bool)
    for group in graph.groups:
        members = list(group.members)
        latest = start[members].max(axis=0)
        if group.across_dp:
            latest = np.broadcast_to(latest.max(axis=1, keepdims=True), latest.shape)
        transfer[members] = end[members] - latest
        grouped[members] = True
    transfer[transfer <= -config.clamp_s] = 0.0
    effective_s = np.where(grouped[cells[0]], transfer[cells], rows["duration"].to_numpy())
    ops = rows.select(
        "node",
        "slot",
        "dp",
        "step",
        "dp_rank",
        "stage",
        "rank",
        "optype",
        pl.col("optype").replace(ATTRIBUTION_TYPE).alias("attribution_type"),
        pl.when(pl.col("optype").is_in(list(IDEAL_BY_MEDIAN)))
        .then(pl.lit("median"))
        .otherwise(pl.lit("mean"))
        .alias("ideal_stat"),
        pl.col("optype").is_in(list(COMPUTE)).alias("compute"),
        pl.format("stage {}", pl.col("stage")).alias("work"),
        pl.Series("duration_ms", effective_s * 1e3),
        pl.lit(0.0).alias("gap_ms"),
    ).cast(OPS_SCHEMA)  # type: ignore[arg-type]
    measured = (
        rows.group_by("step")
        .agg(((pl.col("end_s").max() - pl.col("start_s").min()) * 1e3).alias("measured_ms"))
        .sort("step")
        .cast(MEASURED_SCHEMA)  # type: ignore[arg-type]
    )
    return ReplayCase(graph=graph, ops=ops, measured=measured, source="op-table")
