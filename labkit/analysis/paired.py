"""What a change saves per turn, turn by turn, with the noise of one run.

Two rollouts of the same scripted task make the same turns with the same histories, so each
turn of one can be set against the same turn of the other. The mean of those per-turn
differences is the saving; their spread says how sure one pair of runs is of it (the standard
error of the mean). A saving is named only when it is at least three of those from zero.

    >>> s = Saving.of([100, 104, 98, 102], [88, 93, 86, 89])
    >>> round(s.ms, 1), round(s.noise_ms, 1), round(s.share, 3), s.sure
    (12.0, 0.4, 0.119, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from labkit.analysis.metrics import turns

SURE = 3.0  # standard errors a saving must clear before one run names it


@dataclass(frozen=True)
class Saving:
    """How much lower a per-turn time is after a change than before it (ms), turn by turn.

        s = saving(naive.frame(), socket.frame(), column="wall")
        print(s.shown(), "sure" if s.sure else "within the noise")
    """

    ms: float  # the mean per-turn saving
    noise_ms: float  # its standard error
    before_ms: float  # the mean per-turn time before the change
    turns: int

    @classmethod
    def of(cls, before_ms: Sequence[float], after_ms: Sequence[float]) -> Saving:
        """From the per-turn times of the same turns, before and after; at least three turns."""
        if len(before_ms) != len(after_ms) or len(before_ms) < 3:
            raise ValueError("a per-turn saving needs the same three or more turns before and after")
        saved = [b - a for b, a in zip(before_ms, after_ms, strict=True)]
        n = len(saved)
        mean = sum(saved) / n
        spread = math.sqrt(sum((v - mean) ** 2 for v in saved) / (n - 1))
        return cls(mean, spread / math.sqrt(n), sum(before_ms) / n, n)

    @property
    def share(self) -> float:
        """The saving as a share of the time before the change."""
        return self.ms / self.before_ms if self.before_ms else 0.0

    @property
    def noise_share(self) -> float:
        """The noise as a share of the time before the change (the ± of ``share``)."""
        return self.noise_ms / self.before_ms if self.before_ms else 0.0

    def shown(self) -> str:
        """The share saved with its noise, as a learner reads it.

        >>> Saving(12, 1.5, 100, 18).shown()
        '12% ± 2%'
        """
        return f"{self.share:.0%} ± {self.noise_share:.0%}"

    @property
    def sure(self) -> bool:
        """Far enough from zero (``SURE`` standard errors) for one run to say it saves."""
        return self.ms > SURE * self.noise_ms

    def against(self, other: Saving) -> float:
        """How many standard errors this saving is above ``other`` (both from their own runs).

        >>> Saving(12, 1, 100, 18).against(Saving(8, 1, 100, 18)) > 2.8
        True
        """
        return (self.ms - other.ms) / math.hypot(self.noise_ms, other.noise_ms)


def saving(
    before: pd.DataFrame, after: pd.DataFrame, column: str = "ttft", skip_first: bool = True
) -> Saving:
    """Per turn, how much lower ``column`` of ``turns()`` (``ttft``, ``api``, ``wall``) is in
    ``after`` than in ``before``: two rollouts of the same task.

    Turn 0 is left out by default: it opens the connection and prefills the system prompt.

        saving(naive_frame, sprint_frame).shown()                # the TTFT cut, e.g. '23% ± 2%'
        saving(naive_frame, socket_frame, column="wall").sure    # end to end, beyond the noise?
    """
    both = pd.concat(
        [turns(before)[column], turns(after)[column]], axis=1, keys=["before", "after"]
    ).dropna()
    if skip_first:
        both = both[both.index > both.index.min()]
    return Saving.of(list(both["before"] * 1000), list(both["after"] * 1000))
