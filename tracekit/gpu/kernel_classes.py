"""Which GPU activity is compute, communication or memory traffic: one declarative pattern table.

Each ``KernelPattern`` row names a regular expression over GPU event names (searched, so the
``void `` prefix and template arguments need no care), optionally a Kineto category, and the
``kernel_class`` (compute, communication, memory) and ``comm_class`` it assigns. Rows are tried in
order and the first match wins; an event no row matches is compute. docs/gpu.md documents the
table; users add rows in a TOML or YAML file (``load_patterns``), which go before the built-in ones.

Not for: HTA's own, coarser classification (``tracekit.gpu.hta_compat`` declares that one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.errors import TracekitError

COMPUTE, COMMUNICATION, MEMORY = "compute", "communication", "memory"
KERNEL_CLASSES = (COMPUTE, COMMUNICATION, MEMORY)

P2P = "p2p"
"""Point-to-point SendRecv: pipeline send/recv (NCCL also builds all-to-all from it)."""
EP_DISPATCH, EP_COMBINE, EP_OTHER = "ep_dispatch", "ep_combine", "ep_other"
"""Expert-parallel all-to-all: token dispatch, combine, and its notify/barrier kernels."""
DP_COLLECTIVE = "dp_collective"
"""Data-parallel collectives: AllReduce, ReduceScatter, AllGather."""
OTHER_COLLECTIVE = "other_collective"
"""Any other communication kernel (Broadcast, Reduce, vendor kernels without a finer row)."""
COMM_CLASSES = (P2P, EP_DISPATCH, EP_COMBINE, EP_OTHER, DP_COLLECTIVE, OTHER_COLLECTIVE)

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
"""Kineto categories of GPU work. ``gpu_user_annotation`` spans are labels, not work."""


@dataclass(frozen=True)
class KernelPattern:
    """One row of the classification table."""

    pattern: str
    """Regex searched in the GPU event name."""
    kernel_class: str
    """compute, communication or memory."""
    comm_class: str | None = None
    """Sub-class of communication (``COMM_CLASSES``); None for compute and memory."""
    category: str | None = None
    """Only events of this Kineto category match; None: any GPU category."""
    note: str = ""
    """Why the row exists (shown in docs/gpu.md)."""

    def __post_init__(self) -> None:
        if self.kernel_class not in KERNEL_CLASSES:
            raise TracekitError(f"kernel class {self.kernel_class!r} is not one of {KERNEL_CLASSES}")
        if (self.kernel_class == COMMUNICATION) != (self.comm_class is not None):
            raise TracekitError(
                f"pattern {self.pattern!r}: comm_class is required for, and only for, communication"
            )
        if self.comm_class is not None and self.comm_class not in COMM_CLASSES:
            raise TracekitError(f"comm class {self.comm_class!r} is not one of {COMM_CLASSES}")
        try:
            re.compile(self.pattern)
        except re.error as error:
            raise TracekitError(f"pattern {self.pattern!r} is not a regular expression ({error})") from None


KERNEL_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern("", MEMORY, category="gpu_memcpy", note="every Kineto memcpy"),
    KernelPattern("", MEMORY, category="gpu_memset", note="every Kineto memset"),
    KernelPattern(r"^(Memcpy|Memset)", MEMORY, note="copy engines reported as kernels"),
    KernelPattern(
        r"^(nccl|rccl)[A-Za-z0-9_]*(SendRecv|_Send|_Recv)", COMMUNICATION, P2P, note="NCCL/RCCL p2p"
    ),
    KernelPattern(
        r"^(nccl|rccl)[A-Za-z0-9_]*(AllReduce|ReduceScatter|AllGather)",
        COMMUNICATION,
        DP_COLLECTIVE,
        note="NCCL/RCCL data-parallel collectives",
    ),
    KernelPattern(
        r"^(nccl|rccl)", COMMUNICATION, OTHER_COLLECTIVE, note="ncclKernel*, ncclDevKernel*, others"
    ),
    KernelPattern(r"(^|[^A-Za-z0-9_])hccl", COMMUNICATION, OTHER_COLLECTIVE, note="Huawei HCCL"),
    KernelPattern(
        r"(deep_ep|dpsk::ep)::([A-Za-z0-9_]+::)*get_dispatch_layout",
        COMPUTE,
        note="DeepEP's layout kernel counts tokens per rank and expert locally: it moves no data",
    ),
    KernelPattern(
        r"(deep_ep|dpsk::ep)::([A-Za-z0-9_]+::)*[A-Za-z0-9_]*dispatch",
        COMMUNICATION,
        EP_DISPATCH,
        note="DeepEP dispatch",
    ),
    KernelPattern(
        r"(deep_ep|dpsk::ep)::([A-Za-z0-9_]+::)*[A-Za-z0-9_]*combine",
        COMMUNICATION,
        EP_COMBINE,
        note="DeepEP combine",
    ),
    KernelPattern(
        r"(deep_ep|dpsk::ep)::", COMMUNICATION, EP_OTHER, note="DeepEP notify, barrier, cached_notify"
    ),
)
r"""The built-in table, first match wins; anything unmatched is compute. Character classes are
spelt out in ASCII: Unicode word classes make the regex engine's automata many times larger."""

SUSPECT_COMM_NAME = (
    r"(?i)(all_?to_?all|all_?reduce|all_?gather|reduce_?scatter|sendrecv|nvshmem|ibgda|broadcast)"
)
"""Kernel names that look like communication: warned about when no row classifies them."""

CLASS_SCHEMA: dict[str, pl.DataType] = {"kernel_class": pl.String(), "comm_class": pl.String()}
"""Columns ``classify`` adds: kernel_class never null; comm_class null unless communication."""


def _row(entry: Any, source: Path) -> KernelPattern:
    if not isinstance(entry, dict) or "pattern" not in entry or "class" not in entry:
        raise TracekitError("each [[kernel_class]] entry needs `pattern` and `class`", source)
    known = {"pattern", "class", "comm_class", "category", "note"}
    unknown = set(entry) - known
    if unknown:
        raise TracekitError(
            f"unknown keys {sorted(unknown)} in a kernel_class entry (known: {sorted(known)})", source
        )
    try:
        return KernelPattern(
            pattern=str(entry["pattern"]),
            kernel_class=str(entry["class"]),
            comm_class=entry.get("comm_class"),
            category=entry.get("category"),
            note=str(entry.get("note", "")),
        )
    except TracekitError as error:
        raise TracekitError(str(error), source) from None


def load_patterns(path: Path) -> tuple[KernelPattern, ...]:
    """User rows from a TOML or YAML file (a ``kernel_class`` list), placed before the built-in table."""
    try:
        text = path.read_bytes()
    except OSError as error:
        raise TracekitError(f"cannot read kernel classes: {error.strerror}", path) from None
    # Imported here, not at the top: only a user's pattern file needs a parser (yaml costs 10 ms).
    import yaml

    from tracekit.compat import tomllib

    try:
        document = tomllib.loads(text.decode()) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, UnicodeDecodeError) as error:
        raise TracekitError(
            f"not valid {'TOML' if path.suffix == '.toml' else 'YAML'} ({error})", path
        ) from None
    entries = (document or {}).get("kernel_class") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise TracekitError(
            "no `kernel_class` list of {pattern, class[, comm_class, category]} entries", path
        )
    return tuple(_row(entry, path) for entry in entries) + KERNEL_PATTERNS


def classify(gpu: pl.DataFrame, patterns: tuple[KernelPattern, ...] = KERNEL_PATTERNS) -> pl.DataFrame:
    """``gpu`` (rows with ``cat`` and ``name``) with ``CLASS_SCHEMA`` columns added by the first matching row.

    The patterns run once per distinct (category, name): a trace repeats a few hundred kernel names.
    """
    kernel_class: pl.Expr = pl.lit(COMPUTE)
    comm_class: pl.Expr = pl.lit(None, dtype=pl.String())
    for row in reversed(patterns):  # built back to front so the first row ends outermost
        hit = pl.col("name").str.contains(row.pattern) if row.pattern else pl.lit(True)
        if row.category is not None:
            hit = hit & (pl.col("cat") == row.category)
        kernel_class = pl.when(hit).then(pl.lit(row.kernel_class)).otherwise(kernel_class)
        comm_class = pl.when(hit).then(pl.lit(row.comm_class, dtype=pl.String())).otherwise(comm_class)
    names = (
        gpu.select("cat", "name")
        .unique()
        .with_columns(kernel_class.alias("kernel_class"), comm_class.alias("comm_class"))
    )
    return gpu.join(names, on=["cat", "name"], how="left", nulls_equal=True, maintain_order="left")


def suspect_compute(classified: pl.DataFrame) -> list[str]:
    """Distinct names classified compute that look like communication (to warn about, never silently)."""
    names = classified.filter(pl.col("kernel_class") == COMPUTE).get_column("name").unique()
    return names.filter(names.str.contains(SUSPECT_COMM_NAME)).sort().to_list()
