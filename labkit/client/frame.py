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
  whether a connection was opened (``new_connection``), whether a span ran beside
  the turn's critical path (``overlapped``: billing, or a steer's ``uplink``,
  which names its ``steer``: a turn's API time, its wall time less inference and
  the client's, does not count it again).
- ``start`` is seconds on the machine's monotonic clock, which server and
  client share on one machine; ``t`` is the same, from the rollout's first send.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from labkit.api.stages import CLIENT_INSTANTS, ClientStep, bucket_of
from labkit.client.records import TurnRecord
from labkit.designs import compose

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


def _server_rows(
    design: str, records: Iterable[TurnRecord], spans: Mapping[str, list[dict[str, Any]]]
) -> Iterable[dict[str, Any]]:
    appended = compose(design).appended  # a composed design may be appended too
    for record in records:
        for span in spans.get(record.response_id, []):
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


def _client_rows(records: Iterable[TurnRecord]) -> Iterable[dict[str, Any]]:
    for record in records:
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


def rollout_frame(
    design: str, records: Sequence[TurnRecord], spans: Mapping[str, list[dict[str, Any]]]
) -> pd.DataFrame:
    """The frame of a rollout over ``design``: its turns as the client recorded them, and the
    server's spans of each turn's response (by response id). ``Rollout.frame()`` calls this."""
    rows = [*_server_rows(design, records, spans), *_client_rows(records)]
    frame = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("design", "bucket")])
    frame.insert(0, "design", design)
    frame.insert(3, "bucket", frame["stage"].map(bucket_of))
    frame["t"] = frame["start"] - frame.loc[frame["stage"] == "send", "start"].min()
    return frame.sort_values(["turn", "start"], kind="stable").reset_index(drop=True)
