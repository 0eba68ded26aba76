"""A figure's words read as time: a reduction one way, "X% faster" two ways (time saved, or speed)."""

from __future__ import annotations

import pytest

from labkit.analysis.fit import read_inputs
from labkit.analysis.fit.wording import as_speed, says_faster, time_saved_at_speed


def test_a_reduction_reads_one_way_and_faster_two() -> None:
    figures = {f.name: f for f in read_inputs().figures}
    assert as_speed(figures["the sprint's TTFT"]) is None  # "a nearly 45% reduction": less time either way
    assert as_speed(figures["Vercel AI SDK"]) is None  # "latency reductions of up to 40%"
    # "40% faster" as 1.4 times the speed: 1/1.4 of the time, 29% less
    assert as_speed(figures["agent loops end to end"]) == pytest.approx(1 - 1 / 1.4)
    faster = [f for f in figures.values() if says_faster(f.quote)]
    assert [f.name for f in faster] == ["agent loops end to end", "Cline", "Cursor"]
    assert all(0 < as_speed(f) < f.value for f in faster)  # as speed, always less time saved


@pytest.mark.parametrize("gain", [0.01, 0.3, 0.39, 0.4, 1.0, 3.0])
def test_time_saved_at_a_speed_is_the_time_it_no_longer_takes(gain: float) -> None:
    saved = time_saved_at_speed(gain)
    # the time left, at the new speed, does the old work
    assert (1 - saved) * (1 + gain) == pytest.approx(1.0)
    assert time_saved_at_speed(1.0) == pytest.approx(0.5)  # twice as fast: half the time
