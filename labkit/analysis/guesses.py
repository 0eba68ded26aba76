"""A learner's prediction, checked against what ran: one sentence back, in the learner's terms.

A notebook's "Predict" cell keeps the guess in a variable (``None`` until the learner
writes one, so *Run All* still works); a later cell calls ``check`` with the measurement.

    check(guess, measured, what, fmt="{:.0%}", spread=None) -> str
    decide(difference, noise, words=("larger", "smaller"), what="the difference", fmt="{:.0%}")
        -> str | Undecided
    Undecided(reason, answers=())        # a run that could not decide, and why
    self_check(questions) -> list[str]   # a notebook's self-check: one line each, then the tally

**Shares** (``fmt`` shows a fraction as percent, as ``"{:.0%}"`` does): 0.3, ``"0.3"``, 30,
``"30%"`` and ``"30 %"`` all mean 30%. A bare number above 1 (up to 100) is read as percent, and
the sentence says so (so does 1, read as 100%):

    >>> check(0.3, 0.58, "the API's share at 1,000 tokens/s")
    "You guessed 30% for the API's share at 1,000 tokens/s; this run measured 58%: 28 points low."
    >>> check(30, 0.58, "the API's share")
    "You guessed 30% for the API's share (read 30 as 30%); this run measured 58%: 28 points low."

**Right** is a guess that ``fmt`` shows as it shows the measurement. **Close** is within a
quarter of the measured value, never less than 3 points for a share (``CLOSE``,
``SHARE_FLOOR``), widened by the run's noise: ``spread``, the ± of the measurement (one run's
standard error, or the spread of repeated runs) in its own unit (0.03 is 3 points for a share).
The measurement is shown to the precision that noise allows. That is, close when
``|guess - measured| <= max(CLOSE * |measured|, floor) + spread``, the floor 0.03 for a share and
0 otherwise. So 20% against a measured 10% is 10 points high (the tolerance is 3 points), and 65%
against 58% is close (within 14.5 points):

    >>> check("20%", 0.10, "the saving")
    'You guessed 20% for the saving; this run measured 10%: 10 points high.'
    >>> check(0.65, 0.58, "the saving")
    'You guessed 65% for the saving; this run measured 58%: close (7 points high).'
    >>> print(check(0.15, 0.10, "the saving", spread=0.03))  # doctest: +NORMALIZE_WHITESPACE
    You guessed 15% for the saving; this run measured 10% (± 3 points of noise):
    close (5 points high).
    >>> print(check(0.15, 0.082, "the lead", spread=0.004))  # doctest: +NORMALIZE_WHITESPACE
    You guessed 15% for the lead; this run measured 8.2% (± 0.4 points of noise):
    7 points high.

Other numbers are compared the same way, in the unit ``fmt`` shows:

    >>> check(2.0, 1.2, "end to end", fmt="{:.1f} s")
    'You guessed 2.0 s for end to end; this run measured 1.2 s: 1.7× too high.'

**Words** are read by meaning: ``"flat"``, ``"stays the same"`` and ``"constant"`` mean
``"stays flat"``; ``"increases"``, ``"rises"``, ``"goes up"``, ``"bigger"`` mean ``"grows"``
(or ``"larger"``, ``"more"``), ``"fewer"`` means ``"less"``; case, spaces and punctuation do not
matter. An answer outside the vocabularies (a step's name) is compared as text, the same way.

    >>> print(check("Flat.", "stays flat", "the tokens per turn"))  # doctest: +NORMALIZE_WHITESPACE
    You guessed 'Flat.' for the tokens per turn (read as 'stays flat');
    this run's answer is 'stays flat': right.
    >>> print(check("maybe", "grows", "the tokens per turn"))  # doctest: +NORMALIZE_WHITESPACE
    You guessed 'maybe' for the tokens per turn, which is not an answer labkit reads:
    write 'grows', 'stays flat', 'falls' or 'shrinks' (or words meaning the same). This run's answer is
    'grows'.

**An inconclusive run** is passed as an ``Undecided``; ``decide`` makes one when a difference
is within the noise, and names the word otherwise:

    >>> decide(0.08, 0.03, what="the gap between the two savings")
    'larger'
    >>> gap = decide(0.02, 0.03, what="the gap between the two savings")
    >>> gap.reason
    "the gap between the two savings is 2 points, within the runs' noise of ±3 points"
    >>> print(check("bigger", gap, "the share at 4,000 tokens/s"))  # doctest: +NORMALIZE_WHITESPACE
    You guessed 'bigger' for the share at 4,000 tokens/s (read as 'larger'); this run could not
    decide (the gap between the two savings is 2 points, within the runs' noise of ±3 points),
    so your guess is neither confirmed nor marked wrong: more runs may decide.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.analysis.precision import decimals, fixed, percent, points

SHAPES = ("grows", "stays flat", "falls")
# The answer sets a notebook asks for; a guess is told every answer asked beside the measured one.
VOCABULARIES: tuple[tuple[str, ...], ...] = (
    SHAPES,
    ("larger", "smaller"),
    ("more", "less"),
    ("grows", "shrinks"),
    ("yes", "no"),
)
_ANSWERS = tuple(dict.fromkeys(word for v in VOCABULARIES for word in v))  # each answer once
CLOSE = 0.25  # a guess within this share of the measured value is close...
SHARE_FLOOR = 0.03  # ... and, for a share, always within 3 points of it

# Each meaning, and the words (after ``_plain``, fillers dropped) that say it.
_MEANINGS: dict[str, str] = {
    "up": "grows, grow, growing, grew, increases, increase, increasing, increased, rises, rise, rising, "
    "rose, climbs, climb, climbing, up, goes up, go up, going up, went up, larger, large, bigger, big, "
    "greater, higher, more",
    "flat": "stays flat, stay flat, flat, flattens, flat line, constant, stays constant, unchanged, steady, "
    "stable, level, stays level, same, stays the same, stay the same, remains the same, stays, no change, "
    "does not change, doesnt change",
    "down": "falls, fall, falling, fell, shrinks, shrink, shrinking, shrank, decreases, decrease, "
    "decreasing, decreased, drops, drop, dropping, dropped, declines, decline, declining, down, goes down, "
    "go down, going down, went down, smaller, small, lower, less, fewer",
    "yes": "yes, y, yeah, yep, yup, true, correct",
    "no": "no, n, nope, false",
}
# Words that carry no meaning here: "it will get bigger" reads as "bigger".
_FILLERS = (
    "the, a, it, they, its, will, would, should, probably, gets, get, getting, becomes, become, much, lot"
)


def _kept(plain: str) -> str:
    """``plain`` without the words that carry no meaning here: ``"it gets bigger"`` -> ``"bigger"``."""
    return " ".join(w for w in plain.split() if w not in _FILLERS.split(", "))


# Every listed word, and the same with its fillers dropped ("stays the same" -> "stays same").
_SENSES = {
    form: sense for sense, words in _MEANINGS.items() for w in words.split(", ") for form in (w, _kept(w))
}
_SHARE_FORMAT = re.compile(r"\{[^}]*%\}")  # a format whose presentation type is %: a share
_NUMBER = re.compile(r"^(?:about|around|roughly|~|≈)?\s*([-+]?(?:\d[\d,]*\.?\d*|\.\d+))\s*(.*)$")


@dataclass(frozen=True)
class Undecided:
    """A run that could not decide a question, and why (it names the numbers); ``answers`` are
    the words it would have chosen between, if known.

    >>> Undecided("the two savings are 1 point apart, within the noise of ±4 points").reason[:15]
    'the two savings'
    """

    reason: str
    answers: tuple[str, ...] = ()


def decide(
    difference: float,
    noise: float,
    words: Sequence[str] = ("larger", "smaller"),
    what: str = "the difference",
    fmt: str = "{:.0%}",
) -> str | Undecided:
    """``words[0]`` if ``difference`` exceeds ``noise``, ``words[1]`` if it is below ``-noise``,
    else an ``Undecided`` whose reason names both numbers (in points, for shares).

    >>> decide(-0.05, 0.01, words=("grows", "shrinks"), what="the lead's change")
    'shrinks'
    >>> decide(0.3, 0.5, what="the gap", fmt="{:.1f} s").reason
    "the gap is 0.3 s, within the runs' noise of ±0.5 s"
    """
    if len(words) != 2:
        raise ValueError(f"decide needs two words, one for each direction, not {list(words)}")
    if not (math.isfinite(difference) and math.isfinite(noise)) or noise < 0:
        raise ValueError(f"decide needs a finite difference and a noise of at least 0: {difference}, {noise}")
    if difference > noise:
        return words[0]
    if difference < -noise:
        return words[1]
    if _is_share(fmt):
        gap, band = _points(difference), f"±{_points(noise)}"
    else:
        gap, band = _format(fmt, abs(difference)), f"±{_format(fmt, noise)}"
    return Undecided(f"{what} is {gap}, within the runs' noise of {band}", tuple(words))


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


def check(
    guess: float | str | None,
    measured: float | str | Undecided,
    what: str,
    fmt: str = "{:.0%}",
    spread: float | None = None,
) -> str:
    """One sentence comparing a guess with a measurement: a number (a share when ``fmt`` shows
    percent), a word, or an ``Undecided`` run. See the module's docstring for the rules.

    >>> check(None, 0.25, "the saving")
    'No guess recorded for the saving (set it above and run again): this run measured 25%.'
    >>> check(0.5, 0.45, "the saving")
    'You guessed 50% for the saving; this run measured 45%: close (5 points high).'
    """
    if isinstance(measured, Undecided):
        return _undecided(guess, measured, what, fmt)
    if isinstance(measured, str):
        return _word(guess, measured, what)
    if math.isnan(measured):
        return f"This run gave no number for {what} (it came out as NaN): nothing to check a guess against."
    shown = _measurement(measured, fmt, spread)
    if guess is None:
        return f"No guess recorded for {what} (set it above and run again): this run measured {shown}."
    read = _number(guess, fmt)
    if isinstance(read, str):
        return f"You guessed {guess!r} for {what}, {read}. This run measured {shown}."
    value, note = read
    return (
        f"You guessed {_format(fmt, value)} for {what}{note}; this run measured {shown}: "
        f"{_how_far(value, measured, fmt, spread or 0.0)}."
    )


# ---------------------------------------------------------------- numbers


def _number(guess: float | str, fmt: str) -> tuple[float, str] | str:
    """The guess as a number in the measured value's unit, and a note when its reading was a
    choice; or, for a guess that is not such a number, why (a clause of the sentence)."""
    share = _is_share(fmt)
    want = "which is not a share: write 0.3, 30 or '30%' for 30%" if share else _unit_hint(fmt)
    if isinstance(guess, bool):
        return want
    if isinstance(guess, numbers.Real):  # numpy's numbers too
        number, percent = float(guess), False
    elif not isinstance(guess, str):
        return want
    else:
        found = _NUMBER.match(guess.strip().lower())
        if not found:
            return want
        digits, rest = found.group(1), found.group(2).strip()
        # "0,3" is a decimal comma; "1,000" a thousands separator
        digits = digits.replace(",", ".") if re.fullmatch(r"[-+]?\d+,\d{1,2}", digits) else digits
        number = float(digits.replace(",", ""))
        percent = rest in ("%", "percent", "pct")
        unit = fmt.format(0).lstrip("0123456789.,+- ").strip().lower() if not share else ""
        if rest and not percent and rest != unit:
            return want
        if percent and not share:
            return want
    if not math.isfinite(number):
        return want
    if not share:
        return number, ""
    if percent:
        return number / 100, ""
    if abs(number) < 1:
        return number, ""
    if abs(number) == 1:
        return number, f" (read {_plain_number(number)} as {number:.0%})"
    if abs(number) <= 100:
        return number / 100, f" (read {_plain_number(number)} as {_plain_number(number)}%)"
    return "which is more than 100%: write 0.3, 30 or '30%' for 30%"


def _is_share(fmt: str) -> bool:
    """Whether ``fmt`` shows a fraction as percent (``"{:.0%}"``; not ``"{:.0f}%"``)."""
    return bool(_SHARE_FORMAT.search(fmt))


def _unit_hint(fmt: str) -> str:
    return f"which is not a number: write one such as 1.5 (for {fmt.format(1.5)})"


def _plain_number(x: float) -> str:
    return f"{x:g}"


def _points(share: float) -> str:
    """A share's size in percentage points, in words: ``_points(0.07) -> "7 points"``."""
    return points(share)


def _format(fmt: str, value: float) -> str:
    """``fmt.format(value)``, but never a negative zero: ``-0.004`` in ``{:.0%}`` is ``0%``.

    >>> _format("{:.0%}", -0.004), _format("{:.1f} s", -0.04), _format("{:.1f} s", -0.4)
    ('0%', '0.0 s', '-0.4 s')
    """
    zero = fmt.format(0.0)
    return zero if fmt.format(abs(value)) == zero else fmt.format(value)


def _measurement(measured: float, fmt: str, spread: float | None) -> str:
    """The measured value as a learner reads it: with its noise, when given, and to the precision
    that noise allows; a share in the default format with one decimal where whole percent
    would show a share that is not zero as ``0%``.

    >>> _measurement(0.33, "{:.0%}", 0.04), _measurement(0.003, "{:.0%}", None)
    ('33% (± 4 points of noise)', '0.3%')
    >>> _measurement(1.23, "{:.1f} s", 0.04)
    '1.2 s (± <0.1 s of noise)'
    """
    if not spread:
        return percent(measured) if fmt == "{:.0%}" else _format(fmt, measured)
    if not _is_share(fmt):
        band = _format(fmt, abs(spread))
        if band == fmt.format(0.0):  # a noise below the format's last decimal is not zero
            places = re.search(r"\.(\d+)[fe%]", fmt)
            band = "<" + fmt.format(10.0 ** -(int(places.group(1)) if places else 0))
        return f"{_format(fmt, measured)} (± {band} of noise)"
    places = decimals(spread * 100, most=1)
    return f"{fixed(measured * 100, places)}% (± {points(spread)} of noise)"


def _how_far(guess: float, measured: float, fmt: str, spread: float) -> str:
    """Right, close (within the tolerance, and how far), or how far off."""
    share = _is_share(fmt)
    floor = SHARE_FLOOR if share else 0.0
    tolerance = max(CLOSE * abs(measured), floor) + abs(spread)
    gap = guess - measured
    side = "high" if gap > 0 else "low"
    if _format(fmt, guess) == _format(fmt, measured):
        return "right"
    how_much = f"{_points(gap)} {side}" if share else f"{_format(fmt, abs(gap))} {side}"
    if abs(gap) <= tolerance or math.isclose(abs(gap), tolerance):  # 1.5 - 1.2 is 0.30000000000000004
        return f"close ({how_much})"
    if share:
        return how_much
    if guess > 0 and measured > 0:
        ratio = guess / measured if guess > measured else measured / guess
        return f"{ratio:.1f}× too {side}"
    return f"too {side}"


# ---------------------------------------------------------------- words


def _plain(text: str) -> str:
    """Lower case, punctuation dropped, spaces collapsed: ``" Stays-flat! "`` -> ``"stays flat"``."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower().replace("'", "")).split())


def meaning(word: str) -> str | None:
    """What a word says, if labkit reads it: ``up``, ``flat``, ``down``, ``yes`` or ``no``.

    >>> meaning("Goes up!"), meaning("it stays the same"), meaning("fewer"), meaning("maybe")
    ('up', 'flat', 'down', None)
    """
    plain = _plain(word)
    return _SENSES.get(plain) or _SENSES.get(_kept(plain))


def _vocabulary(answer: str) -> tuple[str, ...] | None:
    """Every answer asked beside ``answer``: ``"grows"`` -> grows, stays flat, falls, shrinks."""
    plain = _plain(answer)
    words = tuple(dict.fromkeys(word for v in VOCABULARIES if plain in v for word in v))
    return words or None


def _listed(answers: Sequence[str]) -> str:
    quoted = [repr(a) for a in answers]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


def _reading(guess: str, answers: Sequence[str]) -> str:
    """`` (read as 'grows')`` when ``guess`` is not itself an answer labkit asks for (any
    vocabulary's), naming the answer among ``answers`` (else any) that means the same; else ``""``."""
    if _plain(guess) in _ANSWERS:
        return ""
    sense = meaning(guess)
    same = [a for a in (*answers, *_ANSWERS) if meaning(a) == sense]
    return f" (read as {same[0]!r})" if sense and same else ""


def _word(guess: float | str | None, answer: str, what: str) -> str:
    found = f"this run's answer is {answer!r}"
    if guess is None:
        return f"No guess recorded for {what} (set it above and run again): {found}."
    answers = _vocabulary(answer)
    if not isinstance(guess, str):
        expected = f"one of {_listed(answers)}" if answers else "a word"
        return f"You guessed {guess!r} for {what}, which wants {expected}. {found[0].upper()}{found[1:]}."
    if answers is None:  # an answer of its own (a step's name, a label): compared as plain text
        verdict = "right" if _plain(guess) == _plain(answer) else "not this time"
        return f"You guessed {guess!r} for {what}; {found}: {verdict}."
    sense = meaning(guess)
    if sense is None:
        return (
            f"You guessed {guess!r} for {what}, which is not an answer labkit reads: write "
            f"{_listed(answers)} (or words meaning the same). {found[0].upper()}{found[1:]}."
        )
    note = _reading(guess, answers)
    verdict = "right" if sense == meaning(answer) else "not this time"
    return f"You guessed {guess!r} for {what}{note}; {found}: {verdict}."


# ---------------------------------------------------------------- an undecided run


def _undecided(guess: float | str | None, run: Undecided, what: str, fmt: str) -> str:
    couldnt = f"this run could not decide ({run.reason})"
    if guess is None:
        return f"No guess recorded for {what} (set it above and run again); {couldnt}."
    shown, note = repr(guess), ""
    if run.answers:  # a question in words
        if not isinstance(guess, str) or (
            meaning(guess) is None and _plain(guess) not in map(_plain, run.answers)
        ):
            return (
                f"You guessed {guess!r} for {what}, which is not an answer labkit reads: write "
                f"{_listed(run.answers)} (or words meaning the same). And {couldnt}."
            )
        note = _reading(guess, run.answers)
    elif not isinstance(guess, bool):
        read = _number(guess, fmt)
        if isinstance(read, tuple):
            shown, note = _format(fmt, read[0]), read[1]
    return (
        f"You guessed {shown} for {what}{note}; {couldnt}, so your guess is neither confirmed nor "
        "marked wrong: more runs may decide."
    )


# ---------------------------------------------------------------- a self-check

# The verdict that ends a ``check`` sentence when the guess was right or close.
_RIGHT_OR_CLOSE = re.compile(r": (?:right|close \([^()]*\))\.$")


def self_check(questions: Sequence[Mapping[str, Any]]) -> list[str]:
    """A notebook's self-check graded: one numbered ``check`` sentence per question (each a
    mapping of ``check``'s arguments), then how many were right or close, counted from those
    sentences' verdicts, and how many were left empty or could not be decided.

    >>> lines = self_check([
    ...     dict(guess="goes up", measured="grows", what="the history a turn carries"),
    ...     dict(guess=0.5, measured=0.45, what="the API's share"),
    ...     dict(guess=None, measured=0.2, what="the saving"),
    ... ])
    >>> print(lines[0])  # doctest: +NORMALIZE_WHITESPACE
    1. You guessed 'goes up' for the history a turn carries (read as 'grows');
    this run's answer is 'grows': right.
    >>> print(lines[-1])
    2 of 3 right or close (1 left empty: set it above and run again).
    >>> self_check([dict(guess=None, measured="yes", what="x")])[-1]
    '0 of 1 right or close (1 left empty: set it above and run again).'
    """
    if not questions:
        raise ValueError("a self-check needs at least one question")
    sentences = [check(**question) for question in questions]
    right = sum(bool(_RIGHT_OR_CLOSE.search(s)) for s in sentences)
    empty = sum(q.get("guess") is None for q in questions)
    undecided = sum(
        isinstance(q.get("measured"), Undecided) and q.get("guess") is not None for q in questions
    )
    notes = []
    if empty:
        notes.append(f"{empty} left empty: set {'it' if empty == 1 else 'them'} above and run again")
    if undecided:
        notes.append(f"{undecided} this run could not decide")
    tally = f"{right} of {len(questions)} right or close" + (f" ({'; '.join(notes)})" if notes else "")
    return [*(f"{n}. {s}" for n, s in enumerate(sentences, 1)), tally + "."]
