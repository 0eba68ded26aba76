"""What "X% faster" says about time: the one word that gives a published figure two readings.

A reduction is less time: "latency reductions of up to 40%" is 40% less. "X% faster" reads two
ways. As **time saved** it is X less time: labkit's reading, the one the fit uses (every outcome
it fits is a share of time saved). As **speed** it is 1 + X times as much done in the same time,
so each run takes 1 / (1 + X) of the time: "40% faster" is then 1 - 1/1.4 = 29% less time.

    >>> round(time_saved_at_speed(0.40), 3)
    0.286
    >>> from labkit.analysis.fit.inputs import read_inputs
    >>> [f.name for f in read_inputs().figures if says_faster(f.quote)]
    ['agent loops end to end', 'Cline', 'Cursor']
"""

from __future__ import annotations

from labkit.analysis.fit.inputs import Figure

SPEED_WORD = "faster"  # the word that makes a figure a speed, not a reduction


def says_faster(quote: str) -> bool:
    """True if the words give a speed ("39% faster"), which reads as time saved or as speed.

    >>> says_faster("multi-file workflows are 39% faster"), says_faster("latency reductions of up to 40%")
    (True, False)
    """
    return SPEED_WORD in quote.lower()


def time_saved_at_speed(gain: float) -> float:
    """The share of time saved by ``gain`` more speed (0.25 for "25% faster", 1.25 times the speed).

    >>> round(time_saved_at_speed(0.25), 3)
    0.2
    """
    return 1 - 1 / (1 + gain)


def as_speed(figure: Figure) -> float | None:
    """The figure's share of time saved if its "faster" means speed; None where its words give
    a reduction, which reads one way only.

    >>> from labkit.analysis.fit.inputs import read_inputs
    >>> [None if v is None else round(v, 3) for v in map(as_speed, read_inputs().figures)]
    [None, 0.286, None, 0.281, 0.231]
    """
    return time_saved_at_speed(figure.value) if says_faster(figure.quote) else None
