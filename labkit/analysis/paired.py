"""What a change saves per turn, turn by turn, with the noise of one run.

Two rollouts of the same scripted task make the same turns with the same histories, so each
turn of one can be set against the same turn of the other. The median of those per-turn
differences is the typical turn's saving: a turn that a busy machine held up once, in either
rollout, moves a mean far more than a median. As a share it is taken of the mean turn before
the change, so that times the number of turns it is a share of end to end. Their spread says
how sure one pair of runs is of it (the median's standard error, from the median absolute
deviation). A saving is named only when it is at least three of those from zero, a cost
likewise; in between the change made no difference one run can tell from its noise. Every
figure is written to the precision that noise allows (``labkit.analysis.precision``).

    >>> s = Saving.of([100, 104, 98, 102, 101], [88, 93, 86, 89, 160])
    >>> round(s.ms, 1), s.sure
    (12, True)
    >>> s.said()
    'saved 12.0 ± 0.8 ms a turn'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from labkit.analysis.metrics import turns
from labkit.analysis.precision import percent, with_noise
from labkit.api.stages import ClientStep

SURE = 3.0  # standard errors a saving must clear before one run names it
MAD_TO_SD = 1.4826  # a normal spread's standard deviation, from its median absolute deviation
MEDIAN_SE = 1.2533  # a median's standard error, in standard errors of a mean of as many points


@dataclass(frozen=True)
class Saving:
    """How much lower a per-turn time is after a change than before it (ms), turn by turn.

        s = saving(naive.frame(), socket.frame(), column="wall")
        print(s.shown(), "sure" if s.sure else "within the noise")
    """

    ms: float  # the typical (median) per-turn saving
    noise_ms: float  # its standard error
    before_ms: float  # the mean per-turn time before the change: a share of it is a share of the whole
    turns: int

    @classmethod
    def of(
        cls, before_ms: Sequence[float], after_ms: Sequence[float], base_ms: Sequence[float] | None = None
    ) -> Saving:
        """From the per-turn times of the same turns, before and after; at least three turns.
        ``base_ms``, if given, is what a share is taken of (the whole turn, where the times
        compared leave out a part common to both)."""
        if len(before_ms) != len(after_ms) or len(before_ms) < 3:
            raise ValueError("a per-turn saving needs the same three or more turns before and after")
        saved = sorted(b - a for b, a in zip(before_ms, after_ms, strict=True))
        n = len(saved)
        middle = statistics.median(saved)
        spread = MAD_TO_SD * statistics.median(abs(v - middle) for v in saved)
        base = list(base_ms) if base_ms is not None else list(before_ms)
        return cls(middle, MEDIAN_SE * spread / math.sqrt(n), statistics.fmean(base), n)

    @property
    def share(self) -> float:
        """The saving as a share of the time before the change."""
        return self.ms / self.before_ms if self.before_ms else 0.0

    @property
    def noise_share(self) -> float:
        """The noise as a share of the time before the change (the ± of ``share``)."""
        return self.noise_ms / self.before_ms if self.before_ms else 0.0

    def shown(self) -> str:
        """The share saved with its noise, as a learner reads it, to the noise's precision.

        >>> Saving(12, 1.5, 100, 18).shown(), Saving(12.3, 0.4, 100, 18).shown()
        ('12% ± 2%', '12.3% ± 0.4%')
        >>> Saving(-0.2, 0.3, 100, 18).shown()
        '-0.2% ± 0.3%'
        """
        return percent(self.share, self.noise_share)

    def ms_shown(self) -> str:
        """The milliseconds saved a turn with their noise: ``'45 ± 5 ms'``, ``'0.8 ± 0.4 ms'``.

        >>> Saving(45.2, 5.1, 150, 18).ms_shown(), Saving(-0.83, 0.41, 150, 18).ms_shown()
        ('45 ± 5 ms', '-0.8 ± 0.4 ms')
        """
        return with_noise(self.ms, self.noise_ms, unit=" ms")

    @property
    def sure(self) -> bool:
        """Far enough from zero (``SURE`` standard errors) for one run to say it saves."""
        return self.ms > SURE * self.noise_ms

    @property
    def costs(self) -> bool:
        """Far enough below zero for one run to say the change costs time instead."""
        return self.ms < -SURE * self.noise_ms

    @property
    def saves(self) -> bool | None:
        """A claim's verdict that the change saves: True when the run is sure of it, False when it
        is sure of the opposite (the change costs time), None when the run cannot tell (a noisy
        run is no evidence against a saving).

        >>> Saving(40, 5, 150, 18).saves, Saving(-40, 5, 150, 18).saves, Saving(36, 20, 150, 8).saves
        (True, False, None)
        """
        return True if self.sure else False if self.costs else None

    def said(self) -> str:
        """What the change did to a typical turn, in words true for any value the run gives:
        saved, cost, or no difference beyond the noise (and which way the estimate leans).

        >>> Saving(45, 5, 150, 18).said(), Saving(-12, 3, 150, 18).said()
        ('saved 45 ± 5 ms a turn', 'cost 12 ± 3 ms a turn')
        >>> Saving(-0.8, 0.4, 150, 18).said()
        'made no difference beyond the noise (0.8 ± 0.4 ms a turn more)'
        >>> Saving(0.3, 1.0, 150, 18).said()
        'made no difference beyond the noise (0 ± 1 ms a turn)'
        """
        size = with_noise(abs(self.ms), self.noise_ms, unit=" ms")
        if self.sure:
            return f"saved {size} a turn"
        if self.costs:
            return f"cost {size} a turn"
        lean = "" if size.startswith(("0 ", "0.0 ")) else " less" if self.ms > 0 else " more"
        return f"made no difference beyond the noise ({size} a turn{lean})"

    def about_the_same(self, other: Saving, factor: float = 2.0) -> bool | None:
        """Whether this saving and ``other`` are of one size, within ``factor`` of each other, as
        far as their noise lets one run tell: ``True`` when both are sure and the larger is
        under ``factor`` times the smaller; ``False`` when, even pulled ``SURE`` standard errors
        toward each other, they are still more than ``factor`` apart (or one surely saves where
        the other surely does not); else ``None``.

        >>> Saving(6, 0.5, 40, 19).about_the_same(Saving(8, 0.7, 440, 9))
        True
        >>> Saving(7, 0.3, 40, 19).about_the_same(Saving(-1, 0.4, 440, 9))
        False
        >>> Saving(6, 0.5, 40, 19).about_the_same(Saving(2, 1.5, 440, 9)) is None
        True
        """
        if factor <= 1:
            raise ValueError(f"about_the_same needs a factor above 1, not {factor}")
        big, small = (self, other) if self.ms >= other.ms else (other, self)
        if big.ms - SURE * big.noise_ms > factor * (small.ms + SURE * small.noise_ms):
            return False
        if big.sure and small.sure and big.ms < factor * small.ms:
            return True
        return None

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

    For ``wall`` the turns are compared without their tool runs: both rollouts ran the same
    tools, and how long a tool took on a busy machine is not the change's doing. The share is
    still of the whole turn, tools included. Turn 0 is left out by default: it opens the
    connection and prefills the system prompt.

        saving(naive_frame, sprint_frame).shown()                # the TTFT cut, e.g. '23% ± 2%'
        saving(naive_frame, socket_frame, column="wall").sure    # end to end, beyond the noise?
    """
    parts = {"before": turns(before)[column], "after": turns(after)[column]}
    if column == "wall":
        parts |= {"base": parts["before"]}
        parts["before"] = parts["before"] - _tool_seconds(before, parts["before"].index)
        parts["after"] = parts["after"] - _tool_seconds(after, parts["after"].index)
    both = pd.concat(list(parts.values()), axis=1, keys=list(parts)).dropna()
    if skip_first:
        both = both[both.index > both.index.min()]
    base = list(both["base"] * 1000) if "base" in both else None
    return Saving.of(list(both["before"] * 1000), list(both["after"] * 1000), base)


def _tool_seconds(frame: pd.DataFrame, index: pd.Index) -> pd.Series:
    """Per turn, the seconds the client's tools ran (0 for a turn that ran none)."""
    tools = frame[frame["stage"] == str(ClientStep.TOOL)]
    return tools.groupby("turn")["duration"].sum().reindex(index, fill_value=0.0)
