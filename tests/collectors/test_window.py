"""The --steps grammar."""

from __future__ import annotations

import pytest

from collectors.window import DEFAULT_STEPS, parse_steps


@pytest.mark.parametrize(
    ("text", "window"),
    [("1:3", (1, 3)), (" 0:1 ", (0, 1)), ("5:", (5, None)), ("all", (0, None)), (DEFAULT_STEPS, (1, 3))],
)
def test_parse_steps_accepts_ranges(text: str, window: tuple[int, int | None]) -> None:
    assert parse_steps(text) == window


@pytest.mark.parametrize("text", ["3", "3:3", "4:2", "-1:2", "a:b", ":3", "1:3:1", ""])
def test_parse_steps_rejects_everything_else(text: str) -> None:
    with pytest.raises(ValueError):
        parse_steps(text)
