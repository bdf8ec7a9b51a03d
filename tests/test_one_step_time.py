"""One step time, one saving: every output of a run states the measured step and prices against it.

On every committed sample run, ``report``'s step windows, ``stragglers``' step and prices,
``whatif``'s measured and realized step (its replay keeps the recorded gaps, so it reruns the
measured step) and its rank savings, the dashboard's timelines and straggler marks, and live mode's
assessment of the same actions (cut into the summaries ranks send, as the live tests do) agree to
the last digit, or to the nanosecond where a figure went through a ns timeline. The ideal: the
what-if's ideal step is the dashboard's ideal timeline, and every printed definition of "ideal" is
``IDEAL_DEFINITION``. The same check (``step_agreement``) runs on a real ``tracekit record --live``
capture in ``live/test_live_runs.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from step_agreement import assert_one_step_time

from tracekit.analysis.ideal import IDEAL_DEFINITION, OSDI25_DEFINITION
from tracekit.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted(path.name for path in (REPO / "sample_traces").iterdir() if (path / "run.json").exists())


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_output_states_one_step_time_and_one_saving_per_rank(sample: str) -> None:
    assert_one_step_time(REPO / "sample_traces" / sample)


def test_every_definition_of_the_ideal_in_the_docs_and_help_is_the_constant() -> None:
    for document in ("docs/stragglers.md", "docs/api.md", "docs/dashboard.md"):
        text = " ".join((REPO / document).read_text().split())
        assert IDEAL_DEFINITION in text, document
    help_text = " ".join(CliRunner().invoke(cli, ["whatif", "--help"]).output.split())
    assert IDEAL_DEFINITION.split(" (")[0] in help_text
    assert OSDI25_DEFINITION.split(":")[0] in help_text
