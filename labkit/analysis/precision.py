"""How a measured number is written: to the precision its noise allows, never as a negative zero.

A figure with more digits than its noise supports claims a precision the run does not have
(``8.415005``); one with fewer hides its noise (``12% ± 0%``) or turns a small loss into a
``-0%``. The rule here: the noise is shown to its first significant digit, with at most
``most`` decimals, and the value to the same decimal; a noise smaller than the last decimal
shown is written ``<0.1`` (it is not zero, it is below what is shown); a value that rounds to
zero is ``0``, with no sign.

    >>> with_noise(57.3, 4.2)
    '57 ± 4'
    >>> with_noise(1.838, 0.031, most=2, sign=True)
    '+1.84 ± 0.03'
    >>> percent(0.1234, 0.004)
    '12.3% ± 0.4%'
    >>> percent(-0.0004), percent(0.003)
    ('0%', '0.3%')
"""

from __future__ import annotations

import math


def decimals(noise: float, most: int = 1) -> int:
    """How many decimals show ``noise`` to its first significant digit, at most ``most``.

    >>> decimals(4.2), decimals(0.96), decimals(0.042), decimals(0.042, most=2)
    (0, 1, 1, 2)
    """
    noise = abs(noise)
    if noise == 0 or not math.isfinite(noise):
        return most
    return min(most, max(0, -math.floor(math.log10(noise))))


def fixed(value: float, places: int = 0, sign: bool = False) -> str:
    """``value`` with ``places`` decimals and thousands separators; never ``-0``; ``sign`` puts a
    ``+`` before a value that does not round to zero.

    >>> fixed(-0.04, 1), fixed(1234.5, 0), fixed(0.26, 1, sign=True), fixed(0.0, 1, sign=True)
    ('0.0', '1,234', '+0.3', '0.0')
    """
    if not math.isfinite(value):
        return str(value)
    text = f"{value:,.{places}f}"
    if float(text.replace(",", "")) == 0:
        return text.lstrip("-")
    return f"+{text}" if sign and value > 0 else text


def with_noise(value: float, noise: float, most: int = 1, unit: str = "", sign: bool = False) -> str:
    """``value ± noise``, both to the noise's first significant digit (at most ``most``
    decimals); ``unit`` follows each number (``"%"``) or, if it starts with a space, the pair.

    >>> with_noise(45.2, 5.1, unit=" ms"), with_noise(0.23, 0.004), with_noise(12, 0.0, unit="%")
    ('45 ± 5 ms', '0.2 ± <0.1', '12.0% ± <0.1%')
    """
    places = decimals(noise, most)
    each, after = ("", unit) if unit.startswith(" ") else (unit, "")
    shown_noise = fixed(noise, places)
    if float(shown_noise.replace(",", "")) == 0:
        shown_noise = f"<{fixed(10.0**-places, places)}" if places else "<1"
    return f"{fixed(value, places, sign)}{each} ± {shown_noise}{each}{after}"


def percent(share: float, noise: float | None = None) -> str:
    """A share (0.12 is 12%) in percent: with its noise (``with_noise``, at most one decimal), or
    alone in whole percent, with one decimal when a share that is not zero would show as ``0%``.

    >>> percent(0.57, 0.04), percent(0.123), percent(-0.004), percent(0.0)
    ('57% ± 4%', '12%', '-0.4%', '0%')
    """
    if noise is not None:
        return with_noise(share * 100, noise * 100, most=1, unit="%")
    whole = fixed(share * 100, 0)
    return f"{whole}%" if whole != "0" else f"{fixed(share * 100, 1).removesuffix('.0')}%"


def points(share: float) -> str:
    """A gap between two shares in percentage points, in words, its size only; one decimal
    below a point.

    >>> points(0.07), points(-0.01), points(0.004), points(0.0)
    ('7 points', '1 point', '0.4 points', '0 points')
    """
    size = abs(share) * 100
    text = fixed(size, 0) if round(size) >= 1 or size == 0 else fixed(size, 1)
    if text == "0.0":
        text = "0"
    return f"{text} point" if text == "1" else f"{text} points"
