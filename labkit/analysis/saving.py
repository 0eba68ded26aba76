"""One measure of a saving: the share of a baseline's time a design saves, and the column that
holds it. Every table that sets a design against a baseline (``labkit compare``, a replay, the
what-if predictions, the fit's outcomes, ``lab.compare``) computes it here.

A saving is a *share* of the baseline's time, not a speed-up: saving 0.4 (40%) means the design
takes 0.6 of the baseline's time, a speed-up of 1 / 0.6 = 1.67x.

>>> share_saved(6.0, baseline=10.0)
0.4
>>> share_saved(6.0, baseline=0.0)  # nothing to save from
nan
>>> saved_column("naive"), ttft_cut_column("naive")
('saved_vs_naive', 'ttft_cut_vs_naive')
"""

from __future__ import annotations

from typing import TypeVar

Time = TypeVar("Time")  # a float, or a pandas Series of them


def share_saved(time: Time, baseline: float | None) -> Time | float:
    """The share of ``baseline`` that ``time`` saves: ``1 - time / baseline`` (NaN without one)."""
    if not baseline:
        return float("nan")
    return 1 - time / baseline  # type: ignore[operator,return-value]


def saved_column(baseline: str) -> str:
    """The column holding the end-to-end saving against ``baseline``."""
    return f"saved_vs_{baseline}"


def ttft_cut_column(baseline: str) -> str:
    """The column holding the cut in mean time to first token against ``baseline``."""
    return f"ttft_cut_vs_{baseline}"
