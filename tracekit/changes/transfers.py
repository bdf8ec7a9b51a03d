"""Both runs' cross-rank transfers as the link counterfactuals of ``tracekit.changes.explain`` read them.

A transfer's exposed latency is ``tracekit.stragglers.links``' (how long the consumer started after
its data and its rank were ready); NEW's transfers are tied to their consumer's op in NEW's replay
case, BASE's reduced to one median per link. With ``pairs_in_both`` only, the links compared are
those both runs have (runs compared with ``allow_different``).

Not for: flagging slow links in one run (``tracekit.stragglers.links``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.changes.explain import Transfers
from tracekit.stragglers.links import exposed_latencies

_INPUT = "_input_row"


def new_transfers(actions: pl.DataFrame, node_of_action: np.ndarray) -> pl.DataFrame:
    """NEW's transfers: op_row (the consumer's op in the case ``node_of_action`` maps ``actions`` rows to), link, latency."""
    latencies, ordered = exposed_latencies(actions.with_row_index(_INPUT))
    if latencies.is_empty():
        return pl.DataFrame(
            schema={
                "op_row": pl.Int64(),
                "rank_a": pl.Int32(),
                "rank_b": pl.Int32(),
                "latency_ms": pl.Float64(),
            }
        )
    inputs = ordered[_INPUT].to_numpy()[latencies["row"].to_numpy()]
    return latencies.select(
        pl.Series("op_row", node_of_action[inputs].astype(np.int64)), "rank_a", "rank_b", "latency_ms"
    )


def link_medians(actions: pl.DataFrame) -> pl.DataFrame:
    """BASE's links: rank_a, rank_b and the median exposed latency of their transfers (ms)."""
    latencies, _ = exposed_latencies(actions)
    return latencies.group_by("rank_a", "rank_b").agg(pl.col("latency_ms").median()).sort("rank_a", "rank_b")


def transfers(new_actions: pl.DataFrame, node_of_action: np.ndarray, base_actions: pl.DataFrame) -> Transfers:
    """Both runs' transfers for the link counterfactuals."""
    return Transfers(new=new_transfers(new_actions, node_of_action), base=link_medians(base_actions))
