"""How a turn's time grows with the history it carries: a slope, its noise, and a word only when
the run can tell.

One rollout gives one point per turn: the history the turn carried (prompt tokens) and a time
(the API's, or a few stages'). A straight line through them says how many milliseconds each
1k tokens of history adds; the line's standard error says how sure one run is of that. A word
(``grows``, ``stays flat``, ``falls``) is given only when the slope is at least three standard
errors from zero, or when the whole rollout's change is surely under a tenth of the typical
time; otherwise the run cannot tell, and says why.

    >>> g = Growth.fit([1000, 5000, 9000, 13000], [110, 130, 151, 170])
    >>> round(g.per_1k_ms, 1), g.shape()
    (5.0, 'grows')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from labkit.analysis.guesses import Undecided
from labkit.analysis.metrics import turns
from labkit.analysis.precision import fixed, with_noise

SURE = 3.0  # standard errors a slope must clear before one run names its direction
FLAT = 0.10  # a change over the whole rollout under this share of the typical time is "flat"
# The stages that read the whole history in a stateless design: the rest of a turn's API time
# (the network, the service hops) costs the same at turn 1 and at turn 18.
HISTORY_STAGES = ("validation", "input_safety", "render")


@dataclass(frozen=True)
class Growth:
    """A least-squares line through (history tokens, ms) points, one per turn.

        g = growth(rollout.frame(), stages=HISTORY_STAGES)
        print(g.sentence("the stages that read the history"), g.shape())
    """

    per_1k_ms: float  # ms each 1k tokens of history adds
    noise_ms: float  # the slope's standard error, in the same unit
    history: tuple[float, float]  # the smallest and largest history, tokens
    typical_ms: float  # the mean time per turn

    @classmethod
    def fit(cls, history_tokens: Sequence[float], ms: Sequence[float]) -> Growth:
        """The line through the points; at least three turns with different histories.

        >>> Growth.fit([0, 1000, 2000], [10, 10, 10]).shape()
        'stays flat'
        """
        x = [float(v) / 1000 for v in history_tokens]
        y = [float(v) for v in ms]
        if len(x) != len(y) or len(x) < 3:
            raise ValueError("a growth needs at least three turns, each with a history and a time")
        n = len(x)
        mx, my = sum(x) / n, sum(y) / n
        sxx = sum((v - mx) ** 2 for v in x)
        if sxx == 0:
            raise ValueError("every turn carried the same history: there is no growth to see")
        slope = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / sxx
        residual = sum((b - my - slope * (a - mx)) ** 2 for a, b in zip(x, y, strict=True))
        noise = math.sqrt(residual / (n - 2) / sxx)
        return cls(slope, noise, (min(x) * 1000, max(x) * 1000), my)

    @property
    def over_rollout_ms(self) -> float:
        """How much the line rises from the shortest history to the longest."""
        return self.per_1k_ms * (self.history[1] - self.history[0]) / 1000

    def shape(self) -> str | Undecided:
        """``grows``, ``falls`` or ``stays flat`` when this run can tell, else ``Undecided``.

        >>> Growth.fit([0, 1000, 2000, 3000], [10, 30, 12, 31]).shape().reason[:29]
        'the slope, 4 ± 5 ms per 1k to'
        """
        span_k = (self.history[1] - self.history[0]) / 1000
        if self.per_1k_ms - SURE * self.noise_ms > 0:
            return "grows"
        if self.per_1k_ms + SURE * self.noise_ms < 0:
            return "falls"
        if (abs(self.per_1k_ms) + SURE * self.noise_ms) * span_k < FLAT * abs(self.typical_ms):
            return "stays flat"
        return Undecided(
            f"the slope, {self.slope_shown()} of history, "
            f"is neither {SURE:g} standard errors from zero nor surely flat"
        )

    def slope_shown(self) -> str:
        """The slope with its noise, to the noise's precision (at most two decimals).

        >>> Growth(1.838, 0.031, (1000, 17000), 29).slope_shown()
        '1.84 ± 0.03 ms per 1k tokens'
        >>> Growth(-0.02, 0.4, (1000, 17000), 29).slope_shown()
        '0.0 ± 0.4 ms per 1k tokens'
        """
        return with_noise(self.per_1k_ms, self.noise_ms, most=2, unit=" ms per 1k tokens")

    def sentence(self, what: str) -> str:
        """One line a learner reads: the slope with its noise, and the rise over the rollout.

        >>> print(Growth(1.838, 0.031, (1000, 17000), 29).sentence("the stages"))
        ... # doctest: +NORMALIZE_WHITESPACE
        the stages: +1.84 ± 0.03 ms per 1k tokens of history, +29 ms from the shortest history
        to the longest (a turn took 29 ms on average)
        """
        slope = with_noise(self.per_1k_ms, self.noise_ms, most=2, sign=True, unit=" ms per 1k tokens")
        return (
            f"{what}: {slope} of history, "
            f"{fixed(self.over_rollout_ms, 0, sign=True)} ms from the shortest history to the longest "
            f"(a turn took {fixed(self.typical_ms, 0)} ms on average)"
        )


def history_tokens(frame: pd.DataFrame) -> pd.Series:
    """Per turn, the prompt the turn carried (the render span's ``prompt_tokens``)."""
    rows = frame[(frame["source"] == "server") & (frame["stage"] == "render")]
    return rows.groupby("turn")["detail"].agg(lambda ds: max(d.get("prompt_tokens", 0) for d in ds))


def stage_ms(frame: pd.DataFrame, stages: Sequence[str] = HISTORY_STAGES) -> pd.Series:
    """Per turn, the milliseconds the server spent in ``stages`` (0 where none of them ran).

        stage_ms(frame, ["intermediary"]).median()   # the hop's typical time a turn
    """
    rows = frame[(frame["source"] == "server") & frame["stage"].isin(list(stages))]
    every = pd.Index(sorted(frame["turn"].unique()), name="turn")
    return rows.groupby("turn")["duration"].sum().reindex(every, fill_value=0.0) * 1000


def growth(
    frames: pd.DataFrame | Sequence[pd.DataFrame],
    stages: Sequence[str] | None = None,
    skip_first: bool = True,
) -> Growth:
    """How a rollout's per-turn time grows with its history: the whole API time, or ``stages``'.

    Turn 0 is left out by default: it opens the connection and prefills the system prompt.
    Given several rollouts that did the same API work on the same histories (one task at two
    decode speeds, say), the line goes through all their turns: twice the points, about 1.4
    times less noise in the slope.

        growth(frame).shape()                            # 'grows', 'stays flat', 'falls' or Undecided
        growth(frame, stages=HISTORY_STAGES).per_1k_ms   # ms each 1k tokens of history adds
        growth([slow.frame(), fast.frame()])             # both rollouts' turns, one line
    """
    history: list[float] = []
    ms: list[float] = []
    for frame in [frames] if isinstance(frames, pd.DataFrame) else frames:
        times = turns(frame)["api"] * 1000 if stages is None else stage_ms(frame, stages)
        both = pd.concat([history_tokens(frame), times], axis=1, keys=["history", "ms"]).dropna()
        if skip_first:
            both = both[both.index > both.index.min()]
        history += list(both["history"])
        ms += list(both["ms"])
    return Growth.fit(history, ms)
