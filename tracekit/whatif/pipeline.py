"""The dependency model of a realized pipeline schedule (tracekit's Kineto path).

Nodes are the compute actions of ``tracekit.analysis.realized`` (an overlapped F&B pair is one
node: its halves run as one chunk). Edges:

- in-rank: each rank's actions of a step run in their recorded order;
- cross-rank, from the stage numbering (stage ``s`` feeds ``s + 1``, the rule of
  ``tracekit.schedule.engine``): F(s, m) needs F(s-1, m) unless s is the first stage of m's path;
  the backward (B or I) of (s, m) needs the backward of (s+1, m), or F(s, m) on the last stage of
  m's path; W(s, m) needs I(s, m). A micro-batch's path is the stages it ran on in that step
  (DualPipe's two directions have paths 0..P-1 and P..2P-1).

Producers are found by (step, stage, kind, micro-batch), so a stage may run on any rank. Steps are
independent subgraphs, each replayed from 0. The realized frame carries no communication, so the
replay has no sync groups: its step time is compute and dependencies only, and the gap to the
measured step span is communication, launch gaps and everything unlabelled.

Not for: clock alignment (``tracekit.whatif.clock`` uses ``cross_rank_dependencies``).
"""

from __future__ import annotations

import polars as pl

from tracekit.errors import TracekitError
from tracekit.whatif.case import MEASURED_SCHEMA, OPS_SCHEMA, ReplayCase
from tracekit.whatif.graph import GraphBuilder, GraphCycleError

ACTION_COLUMNS = ("rank", "step", "stage", "kind", "microbatch", "start_ns", "end_ns", "overlapped")
"""Columns of the realized-actions frame this model reads."""

PAIR_KIND = "F&B"
"""Op type of an overlapped forward/backward pair."""

_BACKWARD = ("B", "I")

DEPENDENCY_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int32(),
    "src_rank": pl.Int32(),
    "src_end_ns": pl.Int64(),
    "dst_rank": pl.Int32(),
    "dst_start_ns": pl.Int64(),
}
"""One row per cross-rank data dependency: the consumer cannot start before the producer ends."""


def _producers(stage: int, kind: str, microbatch: int, path: tuple[int, int]) -> list[tuple[int, str, int]]:
    """(stage, kind class, micro-batch) of the actions that must end first; kind class 'bwd' = B or I."""
    first, last = path
    if kind == "F":
        return [(stage - 1, "F", microbatch)] if stage > first else []
    if kind in _BACKWARD:
        return [(stage + 1, "bwd", microbatch)] if stage < last else [(stage, "F", microbatch)]
    return [(stage, "I", microbatch)]


def _role(stage: int, path: tuple[int, int]) -> str:
    """Where a stage sits on a micro-batch's path: first and last stages do different work (embedding, loss)."""
    roles = [name for name, at in (("first", path[0]), ("last", path[1])) if stage == at]
    return "&".join(roles) or "middle"


def _paths(actions: pl.DataFrame) -> dict[tuple[int, int], tuple[int, int]]:
    """(step, micro-batch) -> (first stage, last stage) of the path it ran."""
    spans = actions.group_by("step", "microbatch").agg(
        pl.col("stage").min().alias("lo"), pl.col("stage").max().alias("hi")
    )
    return {(step, mb): (lo, hi) for step, mb, lo, hi in spans.iter_rows()}


def _kind_class(kind: str) -> str:
    return "bwd" if kind in _BACKWARD else kind


def _check(actions: pl.DataFrame, source: str) -> pl.DataFrame:
    missing = [c for c in ACTION_COLUMNS if c not in actions.columns]
    if missing:
        raise TracekitError(f"realized actions lack columns {missing}", source)
    if actions.is_empty():
        raise TracekitError("no realized actions to replay", source)
    twice = actions.group_by("step", "stage", "kind", "microbatch").len().filter(pl.col("len") > 1)
    if not twice.is_empty():
        row = twice.row(0, named=True)
        raise TracekitError(
            f"action {row['stage']}{row['kind']}{row['microbatch']} runs {row['len']} times in step "
            f"{row['step']}: cannot tell which one a dependency waits for",
            source,
        )
    return actions.select(ACTION_COLUMNS).sort("step", "rank", "start_ns", "end_ns")


def cross_rank_dependencies(actions: pl.DataFrame, source: str = "realized actions") -> pl.DataFrame:
    """Every dependency whose producer and consumer ran on different ranks (``DEPENDENCY_SCHEMA``)."""
    actions = _check(actions, source)
    paths = _paths(actions)
    keyed = actions.with_columns(pl.col("kind").replace({"B": "bwd", "I": "bwd"}).alias("kind_class"))
    rows = []
    for row in keyed.iter_rows(named=True):
        path = paths[(row["step"], row["microbatch"])]
        for stage, kind_class, microbatch in _producers(row["stage"], row["kind"], row["microbatch"], path):
            rows.append((row["step"], stage, kind_class, microbatch, row["rank"], row["start_ns"]))
    wants = pl.DataFrame(
        rows,
        schema={
            "step": pl.Int32(),
            "stage": pl.Int32(),
            "kind_class": pl.String(),
            "microbatch": pl.Int32(),
            "dst_rank": pl.Int32(),
            "dst_start_ns": pl.Int64(),
        },
        orient="row",
    )
    producers = keyed.select(
        "step",
        "stage",
        "kind_class",
        "microbatch",
        pl.col("rank").alias("src_rank"),
        pl.col("end_ns").alias("src_end_ns"),
    )
    return (
        wants.join(producers, on=["step", "stage", "kind_class", "microbatch"], how="inner")
        .filter(pl.col("src_rank") != pl.col("dst_rank"))
        .select(list(DEPENDENCY_SCHEMA))
        .cast(DEPENDENCY_SCHEMA)  # type: ignore[arg-type]
    )


def _nodes(actions: pl.DataFrame, source: str) -> list[list[dict]]:
    """Each rank-step's actions grouped into nodes: one action, or the two halves of an F&B pair."""
    nodes: list[list[dict]] = []
    for (_step, rank), rows in actions.group_by("step", "rank", maintain_order=True):
        pending: dict | None = None
        for row in rows.iter_rows(named=True):
            if not row["overlapped"]:
                nodes.append([row])
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
            nodes.append(sorted([pending, row], key=lambda half: half["kind"] != "F"))
            pending = None
        if pending is not None:
            raise TracekitError(
                f"rank {rank}: overlapped action {pending['stage']}{pending['kind']}{pending['microbatch']} has no other half",
                source,
            )
    return nodes


def pipeline_case(actions: pl.DataFrame, source: str) -> tuple[ReplayCase, tuple[str, ...]]:
    """The realized schedule as a replay case, and warnings (dependencies whose producer is absent)."""
    actions = _check(actions, source)
    paths = _paths(actions)
    groups = _nodes(actions, source)
    builder = GraphBuilder()
    where: dict[tuple[int, int, str, int], int] = {}
    previous: dict[tuple[int, int], int] = {}
    for halves in groups:
        first = halves[0]
        label = f"step {first['step']} rank {first['rank']} " + ";".join(
            f"{h['stage']}{h['kind']}{h['microbatch']}" for h in halves
        )
        node = builder.node(label)
        for half in halves:
            where[(half["step"], half["stage"], _kind_class(half["kind"]), half["microbatch"])] = node
            if half["kind"] == "I":
                where[(half["step"], half["stage"], "I", half["microbatch"])] = node
        lane = (first["step"], first["rank"])
        if lane in previous:
            builder.edge(previous[lane], node)
        previous[lane] = node
    absent = 0
    for node, halves in enumerate(groups):
        for half in halves:
            path = paths[(half["step"], half["microbatch"])]
            for stage, kind_class, microbatch in _producers(
                half["stage"], half["kind"], half["microbatch"], path
            ):
                producer = where.get((half["step"], stage, kind_class, microbatch))
                if producer is None:
                    absent += 1
                elif producer != node:
                    builder.edge(producer, node)
    try:
        graph = builder.build()
    except GraphCycleError as error:
        raise TracekitError(
            f"realized order contradicts the pipeline dependencies: {error}", source
        ) from None
    rows = []
    for node, halves in enumerate(groups):
        first = halves[0]
        start = min(h["start_ns"] for h in halves)
        end = max(h["end_ns"] for h in halves)
        kind = PAIR_KIND if len(halves) == 2 else first["kind"]
        work = "/".join(_role(h["stage"], paths[(h["step"], h["microbatch"])]) for h in halves)
        rows.append((node, first["step"], first["stage"], first["rank"], kind, work, (end - start) / 1e6))
    ops = (
        pl.DataFrame(
            rows,
            schema={
                "node": pl.Int32(),
                "step": pl.Int64(),
                "stage": pl.Int32(),
                "rank": pl.Int32(),
                "optype": pl.String(),
                "work": pl.String(),
                "duration_ms": pl.Float64(),
            },
            orient="row",
        )
        .with_columns(
            pl.lit(0, pl.Int32()).alias("slot"),
            pl.lit(0, pl.Int32()).alias("dp"),
            pl.lit(0, pl.Int32()).alias("dp_rank"),
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
    return ReplayCase(graph=graph, ops=ops, measured=measured, source="kineto"), warnings
