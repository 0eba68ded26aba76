"""Reading a rollout's frame (``Rollout.frame()``, built by ``labkit.client.frame``, whose
docstring names its columns): the work each stage did per turn, and one detail of its spans.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd


def stage_work(frame: pd.DataFrame, stages: Iterable[str], *, column: str = "tokens") -> pd.DataFrame:
    """Per turn, the work (``tokens`` or ``items``) each of ``stages`` did: a turn × stage table.

    This is what the connection cache changes: the classifier's and the renderer's tokens grow
    turn by turn for ``naive`` and stay flat for ``websocket``:

        stage_work(rollout.frame(), ["input_safety", "render"])
    """
    chosen = list(stages)
    rows = frame[(frame["source"] == "server") & frame["stage"].isin(chosen)]
    table = rows.pivot_table(index="turn", columns="stage", values=column, aggfunc="sum", fill_value=0)
    return table.reindex(columns=chosen, fill_value=0).astype(int)


def span_detail(frame: pd.DataFrame, stage: str, key: str) -> pd.Series:
    """Per turn, one detail of one stage's span (``None`` where the span lacks it).

        span_detail(rollout.frame(), "render", "cache")     # none, miss, render_cache, connection_cache ...
    """
    rows = frame[(frame["source"] == "server") & (frame["stage"] == stage)]
    return rows.set_index("turn")["detail"].map(lambda d: d.get(key))
