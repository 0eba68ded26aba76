"""Rollouts side by side, as tables with units: what a notebook shows when it compares designs.

``compare`` takes one frame per design, or several (repeated runs): then each figure is the
median of the runs and ``spread`` says how far apart they were, so a comparison that names a
winner can say whether the gap is larger than the noise. ``styled`` formats any such table by
the units in its column names.

    compare({"naive": naive.frame(), "websocket": ws.frame()})            # one run each
    compare({"naive": [a, b, c], "websocket": [d, e, f]}, baseline="naive")  # medians of three
    styled(compare(frames))
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
from pandas.io.formats.style import Styler

from labkit.analysis.metrics import summary
from labkit.analysis.precision import fixed, percent
from labkit.analysis.saving import share_saved

E2E = "end to end (s)"
TTFT = "mean TTFT (ms)"
API_SHARE = "API share"
SPREAD = "spread (±)"
RUNS = "runs"


def saved(baseline: str) -> str:
    return f"saved vs {baseline}"


def ttft_cut(baseline: str) -> str:
    return f"TTFT cut vs {baseline}"


def _figures(frames: Sequence[pd.DataFrame]) -> dict[str, float]:
    runs = [summary(frame) for frame in frames]
    e2e = [run["e2e_s"] for run in runs]
    median = statistics.median(e2e)
    return {
        E2E: median,
        TTFT: statistics.median(run["ttft_mean_s"] for run in runs) * 1000,
        API_SHARE: statistics.median(run["api_share"] for run in runs),
        SPREAD: (max(e2e) - min(e2e)) / 2 / median if median else 0.0,
        RUNS: len(runs),
    }


def compare(
    frames: Mapping[str, pd.DataFrame | Sequence[pd.DataFrame]], baseline: str | None = None
) -> pd.DataFrame:
    """One row per design: end to end, mean TTFT, the API's share, and the saving against
    ``baseline`` (the first design unless named). With repeated runs, medians and their spread
    (half the range of end to end, as a share of the median); with single runs no spread column.

        table = compare({"naive": naive.frame(), "websocket": ws.frame()})
        table.loc["websocket", "saved vs naive"]     # e.g. 0.45
    """
    if not frames:
        raise ValueError("compare needs at least one design's rollout")
    baseline = baseline or next(iter(frames))
    if baseline not in frames:
        raise ValueError(f"the baseline {baseline!r} is not among the designs compared: {list(frames)}")
    runs_of = {d: [runs] if isinstance(runs, pd.DataFrame) else list(runs) for d, runs in frames.items()}
    rows = {design: _figures(runs) for design, runs in runs_of.items()}
    table = pd.DataFrame(rows).T
    table[saved(baseline)] = share_saved(table[E2E], table.loc[baseline, E2E])
    table[ttft_cut(baseline)] = share_saved(table[TTFT], table.loc[baseline, TTFT])
    columns = [E2E, saved(baseline), TTFT, ttft_cut(baseline), API_SHARE]
    if table[RUNS].max() > 1:
        columns += [SPREAD, RUNS]
    table.index.name = "design"
    return table[columns]


SHARES = ("saved", "cut", "share", "spread", "%")  # words that make a column a fraction, shown in percent


def milliseconds(value: float) -> str:
    """A time in ms to two significant digits or more, never ``-0``: what a table shows with no
    noise to go by.

    >>> milliseconds(62.4), milliseconds(8.415005), milliseconds(0.027952), milliseconds(0.0)
    ('62 ms', '8.4 ms', '0.03 ms', '0 ms')
    """
    size = abs(value)
    places = 0 if size >= 10 or size == 0 else 1 if size >= 1 else 2
    return f"{fixed(value, places)} ms"


def _format_of(column: str, values: pd.Series) -> Callable[[float], str]:
    if column.endswith("(s)"):
        return lambda v: f"{fixed(v, 2)} s"
    if "(ms" in column:  # "(ms)", "(ms a turn)"
        return milliseconds
    if any(word in column for word in SHARES):
        return percent
    whole = bool((values.dropna() % 1 == 0).all())
    return functools.partial(fixed, places=0 if whole else 2)  # counts and tokens as they are


def styled(table: pd.DataFrame) -> Styler:
    """The table with each number shown in its column's unit: seconds, ms, percent for savings,
    cuts, shares and spreads, plain numbers for counts; never a negative zero, never a share
    that is not zero shown as ``0%``. A column of numbers held as objects (a table built row
    by row, then turned) is read as numbers first.

        styled(compare(frames))        # 1.79 s · 45% · 62 ms · ...
    """
    table = table.infer_objects()
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    return table.style.format({c: _format_of(str(c), table[c]) for c in numeric}, na_rep="")
