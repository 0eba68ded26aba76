"""A series' shape is read in words (a guess is graded in tests/analysis/test_guesses.py)."""

from __future__ import annotations

import pytest

from labkit import lab


def test_trend_reads_the_shape_of_a_series() -> None:
    assert lab.trend([300, 1200, 2100, 3000]) == "grows"
    assert lab.trend([310, 290, 305, 300, 298, 302]) == "stays flat"
    assert lab.trend([10, 6, 2]) == "falls"
    with pytest.raises(ValueError, match="two values"):
        lab.trend([1.0])
