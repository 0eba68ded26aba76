"""A per-turn saving is said in words true for any value one run can give: saved, cost, or no
difference beyond the noise; its share to the precision its noise allows; and two savings are
called of one size only when the run can tell."""

from __future__ import annotations

import re

import pytest

from labkit.analysis.paired import SURE, Saving


def test_a_quiet_saving_is_shown_in_tenths_not_as_plus_or_minus_zero() -> None:
    """What notebook 03 showed as '12% ± 0%' and notebook 04 as '-0% ± 0%'."""
    assert Saving(12.3, 0.4, 100, 18).shown() == "12.3% ± 0.4%"
    assert Saving(-1.08, 0.9, 437.6, 5).shown() == "-0.2% ± 0.2%"
    assert Saving(-0.1, 0.1, 437.6, 5).shown() == "0.0% ± <0.1%"
    for ms in (-0.3, -0.01, 0.0, 0.01):
        shown = Saving(ms, 0.05, 100, 18).shown()
        assert "± 0%" not in shown and not re.match(r"-0(\.0*)?%", shown), shown


@pytest.mark.parametrize(
    ("ms", "noise", "said"),
    [
        (45.2, 5.1, "saved 45 ± 5 ms a turn"),
        (-12.0, 3.0, "cost 12 ± 3 ms a turn"),
        (-100.0, 40.0, "made no difference beyond the noise (100 ± 40 ms a turn more)"),
        (2.0, 1.5, "made no difference beyond the noise (2 ± 2 ms a turn less)"),
        (0.26, 0.31, "made no difference beyond the noise (0.3 ± 0.3 ms a turn less)"),
        (0.3, 1.0, "made no difference beyond the noise (0 ± 1 ms a turn)"),  # leaning neither way
    ],
)
def test_a_saving_says_saved_cost_or_no_difference(ms: float, noise: float, said: str) -> None:
    """What notebook 01 printed as 'Four times faster decoding saved -0.1 s end to end'."""
    assert Saving(ms, noise, 150, 18).said() == said


def test_saved_and_cost_are_both_three_standard_errors_from_zero() -> None:
    assert Saving(SURE * 1.01, 1, 100, 18).sure and not Saving(SURE * 0.99, 1, 100, 18).sure
    assert Saving(-SURE * 1.01, 1, 100, 18).costs and not Saving(-SURE * 0.99, 1, 100, 18).costs
    assert not Saving(0, 0, 100, 18).sure and not Saving(0, 0, 100, 18).costs


def test_ms_shown_follows_the_noise() -> None:
    assert Saving(45.2, 5.1, 150, 18).ms_shown() == "45 ± 5 ms"
    assert Saving(0.83, 0.41, 150, 18).ms_shown() == "0.8 ± 0.4 ms"
    assert Saving(-0.02, 0.03, 150, 18).ms_shown() == "0.0 ± <0.1 ms"


def test_two_savings_are_of_one_size_only_when_the_run_can_tell() -> None:
    """Notebook 04's lesson: the prototype's lead is fixed work a turn, so about the same
    milliseconds on short turns and on long answers. 7 ms beside -1 ms is not that."""
    short = Saving(6.5, 0.5, 45, 19)
    assert short.about_the_same(Saving(8.9, 0.7, 440, 9)) is True
    assert short.about_the_same(Saving(-1.0, 0.4, 440, 5)) is False
    assert short.about_the_same(Saving(20.0, 1.0, 440, 9)) is False  # surely three times as much
    assert short.about_the_same(Saving(3.0, 1.5, 440, 9)) is None  # the second is not sure to save
    assert short.about_the_same(Saving(14.0, 1.0, 440, 9)) is None  # twice, give or take the noise
    assert Saving(8.9, 0.7, 440, 9).about_the_same(short) is True  # either way round
    with pytest.raises(ValueError, match="factor above 1"):
        short.about_the_same(short, factor=1)


def test_a_saving_needs_the_same_three_or_more_turns() -> None:
    with pytest.raises(ValueError, match="three or more turns"):
        Saving.of([1, 2], [1, 2])
    s = Saving.of([100, 104, 98, 102, 101, 99], [88, 93, 86, 89, 160, 87], base_ms=[200] * 6)
    assert s.turns == 6 and s.before_ms == 200 and s.ms == 12  # the stalled turn moves a mean, not the median
