"""Clock alignment: one offset per host from the causality of cross-rank dependencies.

Ranks on different hosts do not share a clock. A consumer cannot start before its producer ends:
F(s+1, m) on rank b waits for F(s, m) on rank a, and the backward the other way
(``tracekit.analysis.dependencies.cross_rank_dependencies``, within each data-parallel replica: the
replicas of a stage exchange nothing, so only a pipeline's own ranks bound each other's clocks). With ``o_h`` the offset that puts host
h's timestamps on the reference clock (``aligned = local + o_h``), every dependency from host A to
host B gives ``o_B - o_A >= end_A - start_B``. Forward dependencies bound the difference from
below, backward ones from above, so each pair of hosts that exchanges both ways pins
``o_B - o_A`` to an interval ``[lower, upper]``.

Estimate: the interval's midpoint for each such pair (the transfer latency is assumed the same
both ways, as NTP assumes), then one offset per host by least squares over all pairs, the host of
the lowest rank fixed at 0. Ranks on one host share a clock and get one offset (hosts from the
run manifest; one offset per rank when unknown). Every cross-rank dependency, within a host too,
is then checked; those still violated are reported: the offsets cannot satisfy every bound
(ranks said to share a clock that do not, clock drift within the capture, or a host pair bounded
only one way).

Not for: estimating the transfer latency itself, or drift (one constant offset per host).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


OFFSET_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String(),
    "ranks": pl.String(),
    "offset_ns": pl.Int64(),
}
"""One row per host: ns to add to its ranks' timestamps; ranks comma-separated."""

BOUND_SCHEMA: dict[str, pl.DataType] = {
    "host_a": pl.String(),
    "host_b": pl.String(),
    "lower_ns": pl.Int64(),
    "upper_ns": pl.Int64(),
}
"""Per host pair: offset(b) - offset(a) lies in [lower_ns, upper_ns]; null: unbounded that side."""


@dataclass(frozen=True)
class ClockAlignment:
    """Estimated offsets, the bounds they came from, and what they leave violated."""

    offsets: pl.DataFrame
    bounds: pl.DataFrame
    rank_offset_ns: dict[int, int]
    dependencies: int
    """Cross-rank dependencies checked (those between hosts also bound the offsets)."""
    violations: int
    """Of those, how many still have the consumer start before its producer ends after the correction."""
    worst_violation_ns: int
    unresolved_hosts: tuple[str, ...]
    """Hosts not tied to the reference by two-way bounds: left at offset 0."""


def _host_map(ranks: list[int], hosts: dict[int, str] | None) -> dict[int, str]:
    hosts = hosts or {}
    return {rank: hosts.get(rank, f"rank{rank}") for rank in ranks}


def estimate_offsets(
    actions: pl.DataFrame, hosts: dict[int, str] | None = None, source: str = "realized actions"
) -> ClockAlignment:
    """Per-host clock offsets of a realized-actions frame (see module docstring); ``source`` names it in errors."""
    import numpy as np  # here, not at the top: a report of a cached run without labels never aligns clocks

    from tracekit.analysis.dependencies import cross_rank_dependencies  # it loads numpy too

    ranks = sorted(actions["rank"].unique().to_list())
    host_of = _host_map(ranks, hosts)
    names = sorted(set(host_of.values()), key=lambda h: min(r for r in ranks if host_of[r] == h))
    index = {host: i for i, host in enumerate(names)}
    deps = cross_rank_dependencies(actions, source).with_columns(
        pl.col("src_rank").replace_strict(host_of, return_dtype=pl.String()).alias("host_a"),
        pl.col("dst_rank").replace_strict(host_of, return_dtype=pl.String()).alias("host_b"),
        (pl.col("src_end_ns") - pl.col("dst_start_ns")).alias("need_ns"),
    )
    cross = deps.filter(pl.col("host_a") != pl.col("host_b"))
    lower = {
        (a, b): n for a, b, n in cross.group_by("host_a", "host_b").agg(pl.col("need_ns").max()).iter_rows()
    }
    pairs = sorted({tuple(sorted((a, b), key=index.__getitem__)) for a, b in lower})
    bound_rows, equations = [], []
    for a, b in pairs:
        low, rev = lower.get((a, b)), lower.get((b, a))
        upper = None if rev is None else -rev
        bound_rows.append((a, b, low, upper))
        if low is not None and upper is not None:
            equations.append((index[a], index[b], (low + upper) / 2))
    offsets = np.zeros(len(names))
    solved = _connected(len(names), equations)
    if equations and len(names) > 1:
        unknowns = [i for i in range(1, len(names)) if i in solved]
        column = {host: j for j, host in enumerate(unknowns)}
        matrix = np.zeros((len(equations), len(unknowns)))
        target = np.zeros(len(equations))
        for row, (a, b, mid) in enumerate(equations):
            if b in column:
                matrix[row, column[b]] += 1
            if a in column:
                matrix[row, column[a]] -= 1
            target[row] = mid
        if unknowns:
            solution, *_ = np.linalg.lstsq(matrix, target, rcond=None)
            for host, j in column.items():
                offsets[host] = solution[j]
    rank_offset = {rank: round(offsets[index[host_of[rank]]]) for rank in ranks}
    slack = deps.with_columns(
        (
            pl.col("dst_rank").replace_strict(rank_offset, return_dtype=pl.Int64())
            - pl.col("src_rank").replace_strict(rank_offset, return_dtype=pl.Int64())
            - pl.col("need_ns")
        ).alias("slack_ns")
    )["slack_ns"]
    violated = slack.filter(slack < 0)
    return ClockAlignment(
        offsets=pl.DataFrame(
            [
                (host, ",".join(str(r) for r in ranks if host_of[r] == host), round(offsets[i]))
                for i, host in enumerate(names)
            ],
            schema=OFFSET_SCHEMA,
            orient="row",
        ),
        bounds=pl.DataFrame(bound_rows, schema=BOUND_SCHEMA, orient="row"),
        rank_offset_ns=rank_offset,
        dependencies=deps.height,
        violations=violated.len(),
        worst_violation_ns=int(-violated.min()) if violated.len() else 0,  # type: ignore[operator]
        unresolved_hosts=tuple(host for i, host in enumerate(names) if i and i not in solved),
    )


def _connected(count: int, equations: list[tuple[int, int, float]]) -> set[int]:
    """Hosts linked to host 0 through two-way bounded pairs."""
    links: dict[int, set[int]] = {i: set() for i in range(count)}
    for a, b, _ in equations:
        links[a].add(b)
        links[b].add(a)
    seen, todo = {0}, [0]
    while todo:
        for nxt in links[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def apply_offsets(actions: pl.DataFrame, rank_offset_ns: dict[int, int]) -> pl.DataFrame:
    """A copy of a realized-actions frame with each rank's times moved onto the reference clock."""
    shift = pl.col("rank").replace_strict(rank_offset_ns, default=0, return_dtype=pl.Int64())
    return actions.with_columns(pl.col("start_ns") + shift, pl.col("end_ns") + shift)
