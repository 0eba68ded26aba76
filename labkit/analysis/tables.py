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

import statistics
from collections.abc import Mapping, Sequence

import pandas as pd
from pandas.io.formats.style import Styler

from labkit.analysis.metrics import summary

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
    table[saved(baseline)] = 1 - table[E2E] / table.loc[baseline, E2E]
    table[ttft_cut(baseline)] = 1 - table[TTFT] / table.loc[baseline, TTFT]
    columns = [E2E, saved(baseline), TTFT, ttft_cut(baseline), API_SHARE]
    if table[RUNS].max() > 1:
        columns += [SPREAD, RUNS]
    table.index.name = "design"
    return table[columns]


SHARES = ("saved", "cut", "share", "spread", "%")  # words that make a column a fraction, shown in percent


def _format_of(column: str, values: pd.Series) -> str:
    if column.endswith("(s)"):
        return "{:.2f} s"
    if column.endswith("(ms)"):
        return "{:.0f} ms"
    if any(word in column for word in SHARES):
        return "{:.0%}"
    whole = bool((values.dropna() % 1 == 0).all())
    return "{:,.0f}" if whole else "{:,.2f}"  # counts and tokens as they are


def styled(table: pd.DataFrame) -> Styler:
    """The table with each number shown in its column's unit: seconds, ms, percent for savings,
    cuts, shares and spreads, plain numbers for counts.

        styled(compare(frames))        # 1.79 s · 45% · 62 ms · ...
    """
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    return table.style.format({c: _format_of(str(c), table[c]) for c in numeric}, na_rep="")
