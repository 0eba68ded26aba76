"""One tidy DataFrame per rollout: a row per span, server stages and client steps together.

Columns: ``design, turn, stage, bucket, source, start, duration, items, tokens,
detail, response_id`` and ``t``.

- ``bucket`` is where the time goes, in the articles' split: ``api`` (the API
  service, the network included), ``inference`` (queue, prefill, decode) or
  ``client`` (building the request, running tools); see ``labkit.api.stages``.
- ``source`` is ``server`` or ``client``. The client's instants (``send``,
  ``first_delta``, ``last_delta``, ``done``) are rows of duration 0.
- ``items`` and ``tokens`` are the work a stage did (a classifier's scanned
  tokens, a render's encoded tokens, a decode's sampled tokens); ``detail`` is
  what else the span knows, as a dict: which cache served the render
  (``cache``), where the history came from (``source``), the ``replica``,
  whether a connection was opened (``new_connection``) or billing overlapped.
- ``start`` is seconds on the machine's monotonic clock, which server and
  client share on one machine; ``t`` is the same, from the rollout's first send.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd

from labkit.api.stages import CLIENT_INSTANTS, ClientStep, bucket_of
from labkit.designs import compose

if TYPE_CHECKING:
    from labkit.client.agent import Rollout

COLUMNS = [
    "design",
    "turn",
    "stage",
    "bucket",
    "source",
    "start",
    "duration",
    "items",
    "tokens",
    "detail",
    "response_id",
]


def _server_rows(rollout: Rollout) -> Iterable[dict[str, Any]]:
    appended = compose(rollout.design).appended  # a composed design may be appended too
    for record in rollout.records:
        for span in rollout.spans.get(record.response_id, []):
            if appended and span.get("segment", 0) != record.turn:
                continue
            yield {
                "turn": record.turn,
                "stage": span["stage"],
                "source": "server",
                "start": span["start"],
                "duration": span["end"] - span["start"],
                "items": span.get("items", 0),
                "tokens": span["tokens"],
                "detail": dict(span.get("detail") or {}),
                "response_id": record.response_id,
            }


def _client_rows(rollout: Rollout) -> Iterable[dict[str, Any]]:
    for record in rollout.records:
        common = {
            "turn": record.turn,
            "source": "client",
            "duration": 0.0,
            "items": 0,
            "tokens": 0,
            "response_id": record.response_id,
        }
        moments = {
            ClientStep.SEND: record.sent,
            ClientStep.FIRST_DELTA: record.first_delta,
            ClientStep.LAST_DELTA: record.last_delta,
            ClientStep.DONE: record.done,
        }
        for stage in CLIENT_INSTANTS:
            moment = moments[stage]
            if moment is not None:
                usage = record.usage or {}
                tokens = usage.get("output_tokens", 0) if stage == ClientStep.DONE else 0
                yield {**common, "stage": str(stage), "start": moment, "tokens": tokens, "detail": {}}
        if record.build is not None:
            start, end = record.build
            yield {**common, "stage": "build", "start": start, "duration": end - start, "detail": {}}
        if record.observed is not None:
            start, end = record.observed
            observe = {"stage": str(ClientStep.OBSERVE), "start": start, "duration": end - start}
            yield {**common, **observe, "detail": {}}
        for tool in record.tools:
            yield {
                **common,
                "stage": str(ClientStep.TOOL),
                "start": tool.start,
                "duration": tool.end - tool.start,
                "items": 1,
                "detail": {"name": tool.name, "output_chars": tool.output_chars},
            }


def rollout_frame(rollout: Rollout) -> pd.DataFrame:
    rows = [*_server_rows(rollout), *_client_rows(rollout)]
    frame = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("design", "bucket")])
    frame.insert(0, "design", rollout.design)
    frame.insert(3, "bucket", frame["stage"].map(bucket_of))
    frame["t"] = frame["start"] - frame.loc[frame["stage"] == "send", "start"].min()
    return frame.sort_values(["turn", "start"], kind="stable").reset_index(drop=True)


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
