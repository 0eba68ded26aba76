"""The metrics, each computed by one function from a rollout's DataFrame.

- TTFT: the client's send to the first output delta it receives.
- End to end: the first send to the last turn's terminal event.
- API overhead of a turn: its wall time (send to the next send, or to the end)
  minus inference (queue, prefill, decode) minus the client's own time
  (building the request, running tools).

Time a notebook spends fetching spans between turns to draw them live (the
``observer`` bucket) is not the agent's: it is taken out of the wall time and
out of end to end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.api.stages import OBSERVER


def _instants(frame: pd.DataFrame, stage: str) -> pd.Series:
    rows = frame[frame["stage"] == stage]
    return rows.groupby("turn")["start"].min()


def turns(frame: pd.DataFrame) -> pd.DataFrame:
    """Per turn: ``wall``, ``ttft``, ``inference``, ``client``, ``api`` (seconds).

        table = turns(rollout.frame())
        table["api"].plot()                  # the API overhead of each turn
    """
    send, done = _instants(frame, "send"), _instants(frame, "done")
    first = _instants(frame, "first_delta").reindex(send.index)
    following = send.shift(-1).fillna(done)
    by_bucket = frame.groupby(["turn", "bucket"])["duration"].sum().unstack(fill_value=0.0)
    watched = pd.Series(_watched_within(frame, send.to_numpy(), following.to_numpy()), index=send.index)
    table = pd.DataFrame(
        {
            "wall": following - send - watched,
            "ttft": first - send,
            "inference": by_bucket.get("inference", 0.0),
            "client": by_bucket.get("client", 0.0),
        }
    ).fillna({"inference": 0.0, "client": 0.0})
    table["api"] = table["wall"] - table["inference"] - table["client"]
    return table


def end_to_end(frame: pd.DataFrame) -> float:
    """First send to the last terminal event, in seconds (less any time spent watching).

        end_to_end(rollout.frame())          # e.g. 1.79 for websocket at 1,000 tokens/s
    """
    start, end = _instants(frame, "send").min(), _instants(frame, "done").max()
    return float(end - start - _watched(frame, start, end))


def _watched(frame: pd.DataFrame, start: float, end: float) -> float:
    """Seconds spent watching (the ``observer`` bucket) within ``[start, end]``: a watcher's redraw
    after the rollout's last answer is outside it, and takes nothing from it."""
    return float(_watched_within(frame, np.array([start]), np.array([end]))[0])


def _watched_within(frame: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``_watched`` for many windows at once (one per turn): every watching span against every
    window in one array operation, where a loop over turns filtered the frame once per turn."""
    rows = frame[frame["bucket"] == OBSERVER]
    begin = rows["start"].to_numpy()
    finish = begin + rows["duration"].to_numpy()
    overlap = np.minimum(finish, ends[:, None]) - np.maximum(begin, starts[:, None])
    return overlap.clip(min=0.0).sum(axis=1)


def summary(frame: pd.DataFrame) -> dict[str, float]:
    """``e2e_s``, ``ttft_mean_s``, ``api_share`` (of end to end) and ``turns`` for one rollout.

        summary(rollout.frame())   # {'e2e_s': 1.8, 'ttft_mean_s': 0.06, 'api_share': 0.4, 'turns': 19}
    """
    table = turns(frame)
    e2e = end_to_end(frame)
    return {
        "e2e_s": e2e,
        "ttft_mean_s": float(table["ttft"].mean()),
        "api_share": float(table["api"].sum() / e2e) if e2e else 0.0,
        "turns": len(table),
    }
