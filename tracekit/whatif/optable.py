"""Reader for the op-table format of the OSDI'25 what-if artifact (ByteDance-Seed/StragglerAnalysis).

An op-table is a Parquet file with one row per recorded op of a Megatron-LM job, plus a YAML file
with the job's parallel sizes. Schema after reading (``OPTABLE_SCHEMA``):

| column | dtype | unit / meaning | null means |
|---|---|---|---|
| dp_rank | Int32 | data-parallel rank of the worker | never null |
| stage | Int32 | pipeline stage of the worker | never null |
| rank | Int32 | global rank of the worker | never null |
| step | Int64 | training step | never null |
| optype | String | op type (``KNOWN_OPTYPES``) | never null |
| start_ts | Float64 | start, seconds (any per-step origin) | never null |
| duration | Float64 | seconds, >= 0 | never null |
| seq_id | Int32 | order among ops of the same type in a step on a worker, by start | never null |
| mc | Int32 | model chunk (virtual stage) within the stage; -1: not applicable | never null |
| gmc | Int32 | model chunk in the whole model; -1: not applicable | never null |
| mb_id | Int32 | micro-batch of a compute op; -1: not applicable | never null |

Not for: the dependency model (``tracekit.whatif.megatron``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from tracekit.errors import TracekitError

OPTABLE_SCHEMA: dict[str, pl.DataType] = {
    "dp_rank": pl.Int32(),
    "stage": pl.Int32(),
    "rank": pl.Int32(),
    "step": pl.Int64(),
    "optype": pl.String(),
    "start_ts": pl.Float64(),
    "duration": pl.Float64(),
    "seq_id": pl.Int32(),
    "mc": pl.Int32(),
    "gmc": pl.Int32(),
    "mb_id": pl.Int32(),
}

KNOWN_OPTYPES: tuple[str, ...] = (
    "forward-compute",
    "backward-compute",
    "forward-send",
    "forward-recv",
    "backward-send",
    "backward-recv",
    "params-all-gather",
    "grads-reduce-scatter",
    "layernorm-grads-all-reduce",
    "embedding-grads-all-reduce",
    "optimizer-clip-main-grad",
    "optimizer",
    "gc",
)
"""Op types the Megatron dependency model knows; anything else is refused, never guessed."""


@dataclass(frozen=True)
class JobMeta:
    """Parallel sizes of the job an op-table came from (the artifact's ``meta-*.yaml``)."""

    dp_size: int
    """Data-parallel replicas."""
    pp_size: int
    """Pipeline stages."""
    tp_size: int = 1
    """Tensor-parallel width (ops of one tensor-parallel group are recorded once)."""
    dsp_size: int = 1
    """Sequence/context-parallel width (likewise recorded once)."""
    vpp_size: int = 1
    """Model chunks per stage (interleaved pipeline)."""
    world_size: int = 1
    """dp_size * pp_size * tp_size * dsp_size."""
    trial_name: str = ""
    """Free-form job name."""

    def __post_init__(self) -> None:
        for name in ("dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.world_size != self.dp_size * self.pp_size * self.tp_size * self.dsp_size:
            raise ValueError(
                f"world_size {self.world_size} != dp_size*pp_size*tp_size*dsp_size "
                f"({self.dp_size}*{self.pp_size}*{self.tp_size}*{self.dsp_size})"
            )

    @property
    def uses_dp(self) -> bool:
        """True when gradients and parameters are synchronized across replicas (DP collectives exist)."""
        return self.dp_size * self.dsp_size > 1


def read_meta(path: Path) -> JobMeta:
    """Parse a meta YAML; TracekitError naming the file on any fault."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise TracekitError(f"unreadable job metadata ({error})", path) from None
    if not isinstance(document, dict):
        raise TracekitError("job metadata is not a YAML mapping", path)
    fields = {k: document[k] for k in JobMeta.__dataclass_fields__ if k in document}
    missing = {"dp_size", "pp_size"} - set(fields)
    if missing:
        raise TracekitError(f"job metadata lacks {sorted(missing)}", path)
    fields["trial_name"] = str(fields.get("trial_name", ""))
    try:
        return JobMeta(**fields)
    except ValueError as error:
        raise TracekitError(f"bad job metadata: {error}", path) from None


def find_meta(table: Path) -> Path:
    """The one ``meta*.yaml`` beside an op-table; TracekitError when there is none or several."""
    candidates = sorted(table.parent.glob("meta*.y*ml"))
    if len(candidates) != 1:
        found = ", ".join(p.name for p in candidates) or "none"
        raise TracekitError(f"pass --meta: expected one meta*.yaml beside the op-table, found {found}", table)
    return candidates[0]


def read_optable(path: Path) -> pl.DataFrame:
    """Read and validate an op-table Parquet file into ``OPTABLE_SCHEMA``; TracekitError on any fault."""
    try:
        raw = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as error:
        raise TracekitError(f"unreadable op-table ({error})", path) from None
    missing = sorted(set(OPTABLE_SCHEMA) - set(raw.columns))
    if missing:
        raise TracekitError(f"op-table lacks columns {missing}", path)
    try:
        table = raw.select(*(pl.col(name).cast(dtype, strict=True) for name, dtype in OPTABLE_SCHEMA.items()))
    except pl.exceptions.PolarsError as error:
        raise TracekitError(f"op-table column of the wrong type ({error})", path) from None
    nulls = [name for name in table.columns if table[name].null_count()]
    if nulls:
        raise TracekitError(f"op-table has nulls in {nulls}", path)
    unknown = sorted(set(table["optype"].unique().to_list()) - set(KNOWN_OPTYPES))
    if unknown:
        raise TracekitError(f"op-table has op types the dependency model does not know: {unknown}", path)
    for name in ("start_ts", "duration"):
        bad = table.with_row_index("row").filter(~pl.col(name).is_finite())
        if bad.height:
            raise TracekitError(
                f"op-table has {bad.height} non-finite {name} values (NaN or infinite), first in row "
                f"{bad['row'][0]}: {bad[name][0]}",
                path,
            )
    negative = table.with_row_index("row").filter(pl.col("duration") < 0)
    if negative.height:
        raise TracekitError(
            f"op-table has {negative.height} negative durations, first in row {negative['row'][0]}: "
            f"{negative['duration'][0]}",
            path,
        )
    return table
