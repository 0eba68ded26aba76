"""A learner's prediction, checked against what ran: one sentence back.

A notebook's "Predict" cell keeps the guess in a variable (``None`` until the learner
writes one, so *Run All* still works); a later cell calls ``check`` with the measurement.

    >>> check(0.3, 0.58, "the API's share at 1,000 tokens/s")
    "You guessed 30% for the API's share at 1,000 tokens/s; this run measured 58%: 28 points low."
    >>> check("grows", trend([1, 2, 4, 8]), "the classifier's tokens per turn over HTTP")
    "You guessed 'grows' for the classifier's tokens per turn over HTTP; this run's answer is 'grows': right."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SHAPES = ("grows", "stays flat", "falls")


def trend(values: Sequence[float], flat_within: float = 0.25) -> str:
    """A series' shape in words: ``grows``, ``stays flat`` or ``falls`` (last third against first third).

    >>> trend([100, 104, 98, 101]), trend([1, 5, 9]), trend([9, 5, 1])
    ('stays flat', 'grows', 'falls')
    """
    if len(values) < 2:
        raise ValueError("a trend needs at least two values")
    third = max(1, len(values) // 3)
    first, last = sum(values[:third]) / third, sum(values[-third:]) / third
    scale = max(abs(first), abs(last), 1e-12)
    if abs(last - first) <= flat_within * scale:
        return "stays flat"
    return "grows" if last > first else "falls"


def check(guess: float | str | None, measured: float | str, what: str, fmt: str = "{:.0%}") -> str:
    """One sentence comparing a guess with a measurement: a share (within 10 points is close),
    another number (within 20% is close), or a word such as one of ``SHAPES``.

    >>> check(None, 0.25, "the saving")
    'No guess recorded for the saving (set it above and run again): this run measured 25%.'
    >>> check(0.5, 0.45, "the saving")
    'You guessed 50% for the saving; this run measured 45%: close.'
    >>> check(2.0, 1.2, "end to end", fmt="{:.1f} s")
    'You guessed 2.0 s for end to end; this run measured 1.2 s: 1.7× too high.'
    """
    shown = measured if isinstance(measured, str) else fmt.format(measured)
    if guess is None:
        word = isinstance(measured, str)
        found = f"this run's answer is {shown!r}" if word else f"this run measured {shown}"
        return f"No guess recorded for {what} (set it above and run again): {found}."
    if isinstance(measured, str) or isinstance(guess, str):
        verdict = "right" if str(guess).strip().lower() == str(measured).lower() else "not this time"
        return f"You guessed {str(guess)!r} for {what}; this run's answer is {shown!r}: {verdict}."
    verdict = _how_far(guess, measured, fmt)
    return f"You guessed {fmt.format(guess)} for {what}; this run measured {shown}: {verdict}."


def _how_far(guess: float, measured: float, fmt: str) -> str:
    if "%" in fmt:  # shares: the gap in percentage points, within 10 of them is close
        points = round(abs(guess - measured) * 100)
        return "close" if points <= 10 else f"{points} points {'high' if guess > measured else 'low'}"
    if abs(guess - measured) <= 0.2 * abs(measured):
        return "close"
    if guess > 0 and measured > 0:
        ratio = guess / measured if guess > measured else measured / guess
        return f"{ratio:.1f}× too {'high' if guess > measured else 'low'}"
    return "too high" if guess > measured else "too low"


@dataclass(frozen=True)
class Undecided:
    """A run that cannot decide an answer, and why (the answer a guess is checked against then)."""

    reason: str
