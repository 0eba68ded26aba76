"""Measured numbers are written to the precision their noise allows: never '± 0%', never '-0%',
never six decimals of noise."""

from __future__ import annotations

import re

import pytest

from labkit.analysis.precision import decimals, fixed, percent, points, with_noise


@pytest.mark.parametrize(
    ("value", "noise", "shown"),
    [
        (57.3, 4.2, "57% ± 4%"),
        (12.04, 0.4, "12.0% ± 0.4%"),
        (12.0, 0.0, "12.0% ± <0.1%"),  # a noise below what is shown is not zero
        (-0.04, 0.03, "0.0% ± <0.1%"),  # a loss that rounds away is no '-0'
        (-0.3, 0.2, "-0.3% ± 0.2%"),
        (-3.2, 1.1, "-3% ± 1%"),
    ],
)
def test_a_share_with_its_noise_shows_as_many_decimals_as_the_noise_needs(
    value: float, noise: float, shown: str
) -> None:
    assert percent(value / 100, noise / 100) == shown


@pytest.mark.parametrize("share", [-0.0049, -0.0004, -1e-9, 0.0, 1e-9, 0.0004])
def test_no_share_is_ever_a_negative_zero(share: float) -> None:
    for shown in (percent(share), percent(share, 0.001), percent(share, 0.02)):
        assert not re.match(r"-0(\.0*)?%", shown), shown


def test_a_share_that_is_not_zero_is_not_shown_as_zero_percent() -> None:
    assert (percent(0.003), percent(-0.004), percent(0.12)) == ("0.3%", "-0.4%", "12%")


def test_the_noise_decides_the_decimals_up_to_a_limit() -> None:
    assert [decimals(n) for n in (12.0, 1.0, 0.96, 0.5, 0.05, 0.0)] == [0, 0, 1, 1, 1, 1]
    assert decimals(0.004, most=2) == 2 and decimals(0.004, most=3) == 3
    assert with_noise(1.838, 0.031, most=2) == "1.84 ± 0.03"
    assert with_noise(1.838, 0.001, most=2, unit=" ms") == "1.84 ± <0.01 ms"
    assert with_noise(7.0, 0.3, most=0) == "7 ± <1"


def test_fixed_has_thousands_separators_a_sign_when_asked_and_no_negative_zero() -> None:
    assert fixed(-1234.567, 1) == "-1,234.6"
    assert (fixed(-0.0001, 2), fixed(0.0001, 2, sign=True)) == ("0.00", "0.00")
    assert fixed(2.5, 1, sign=True) == "+2.5"


def test_a_gap_in_points_has_tenths_below_one_point() -> None:
    assert [points(g) for g in (0.12, -0.01, 0.004, 0.0004, 0.0)] == [
        "12 points",
        "1 point",
        "0.4 points",
        "0 points",
        "0 points",
    ]
