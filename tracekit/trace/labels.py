"""The label formats tracekit recognizes on profiler annotations, as one declarative table.

Each ``LabelFormat`` names a regular expression over ``user_annotation`` span names, what the
span means (a step, an action, an overlapped pair, a communication wait, a sub-chunk phase such
as DeepSeek's ``attn(F)``) and how trusted it is
when two formats label the same action. docs/labels.md documents the grammar; to teach tracekit a
new format, add a row to ``LABEL_FORMATS``.

Not for: turning matched labels into the realized schedule (``tracekit.analysis.realized``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import polars as pl

from tracekit.schedule.action import action_pattern, pair_pattern


class Role(str, Enum):
    """What a labelled span stands for."""

    STEP = "step"
    ACTION = "action"
    PAIR = "pair"
    COMM = "comm"
    SUBCHUNK = "subchunk"


@dataclass(frozen=True)
class LabelFormat:
    """One recognized label format."""

    name: str
    """Short name reported as the ``source`` of realized actions."""
    role: Role
    pattern: str
    """Anchored regex; named groups: ``step``; or ``stage``, ``kind``, ``mb``; or ``pair``; or ``op``."""
    priority: int
    """Higher wins when two formats label the same action on a rank."""
    fixed_kind: str | None = None
    """Kind implied by the format itself (GPipe's ``Forward i``), when the label has no kind letter."""


LABEL_FORMATS: tuple[LabelFormat, ...] = (
    LabelFormat("tracekit", Role.STEP, r"^tracekit:step#(?P<step>\d+)$", 2),
    LabelFormat("profiler", Role.STEP, r"^ProfilerStep#(?P<step>\d+)$", 1),
    # Actions and pairs use the one grammar of tracekit.schedule.action (groups stage, kind, mb; pair).
    LabelFormat("tracekit", Role.ACTION, rf"^tracekit:{action_pattern('')}$", 3),
    LabelFormat("torch", Role.ACTION, rf"^PP:{action_pattern('')}$", 2),
    LabelFormat("gpipe", Role.ACTION, r"^Forward (?P<mb>\d+)$", 1, fixed_kind="F"),
    LabelFormat("gpipe", Role.ACTION, r"^Backward (?P<mb>\d+)$", 1, fixed_kind="B"),
    LabelFormat("tracekit", Role.PAIR, rf"^tracekit:{pair_pattern(body='pair')}$", 3),
    LabelFormat("torch", Role.PAIR, rf"^PP:{pair_pattern(body='pair')}$", 2),
    LabelFormat("tracekit", Role.COMM, r"^tracekit:comm:(?P<op>.+)$", 3),
    # DeepSeek's DualPipe profile (deepseek-ai/profile-data): a chunk's phases, e.g. ``dispatch(F)``.
    LabelFormat("deepseek", Role.SUBCHUNK, r"^(?P<op>attn|dispatch|mlp|combine)\((?P<kind>[FBW])\)$", 1),
)


LABEL_FIELDS: dict[str, pl.DataType] = {
    "role": pl.String(),
    "source": pl.String(),
    "priority": pl.Int32(),
    "step": pl.Int32(),
    "stage": pl.Int32(),
    "kind": pl.String(),
    "microbatch": pl.Int32(),
    "pair": pl.String(),
    "op": pl.String(),
}
"""Columns ``match_labels`` adds to the event rows it keeps; null where a format has no such field."""

_GROUP_OF_FIELD = {
    "step": "step",
    "stage": "stage",
    "kind": "kind",
    "microbatch": "mb",
    "pair": "pair",
    "op": "op",
}


def _fields(label: LabelFormat, names: pl.Series) -> pl.DataFrame:
    groups = names.str.extract_groups(label.pattern).struct.unnest()
    columns = {
        "role": pl.Series([label.role.value] * len(names)),
        "source": pl.Series([label.name] * len(names)),
        "priority": pl.Series([label.priority] * len(names)),
    }
    for field, group in _GROUP_OF_FIELD.items():
        if group in groups.columns:
            columns[field] = groups[group]
        elif field == "kind" and label.fixed_kind is not None:
            columns[field] = pl.Series([label.fixed_kind] * len(names))
        else:
            columns[field] = pl.Series([None] * len(names))
    return pl.DataFrame(columns).cast(LABEL_FIELDS)  # type: ignore[arg-type]


def match_labels(spans: pl.DataFrame, formats: tuple[LabelFormat, ...] = LABEL_FORMATS) -> pl.DataFrame:
    """The rows of ``spans`` (event-table rows) whose name matches a format, with ``LABEL_FIELDS`` added."""
    matched = [pl.DataFrame(schema={**spans.schema, **LABEL_FIELDS})]
    for label in formats:
        hits = spans.filter(pl.col("name").str.contains(label.pattern))
        if not hits.is_empty():
            matched.append(pl.concat([hits, _fields(label, hits["name"])], how="horizontal"))
    return pl.concat(matched)
