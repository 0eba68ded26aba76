"""One tidy DataFrame per rollout: a row per span, server stages and client steps together.

Columns: ``design, turn, stage, bucket, source, start, duration, tokens, response_id``.
``bucket`` is where the time goes, in the articles' split: ``api`` (the API
service, the network included), ``inference`` (queue, prefill, decode) or
``client`` (building the request, running tools). The client's instants (``send``, ``first_delta``,
``last_delta``, ``done``) are rows of duration 0. ``start`` is seconds on the
machine's monotonic clock, which server and client share on one machine;
``t`` is the same, from the rollout's first send.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from labkit.client.agent import Rollout

INFERENCE_STAGES = ("queue", "prefill", "decode")
CLIENT_INSTANTS = ("send", "first_delta", "last_delta", "done")
CLIENT_STAGES = ("build", "tool")
COLUMNS = ["design", "turn", "stage", "bucket", "source", "start", "duration", "tokens", "response_id"]


def bucket_of(stage: str) -> str:
    """``bucket_of("prefill") -> 'inference'``; tools are ``client``; the rest is ``api``."""
    if stage in INFERENCE_STAGES:
        return "inference"
    if stage in CLIENT_STAGES or stage in CLIENT_INSTANTS:
        return "client"
    return "api"


def _server_rows(rollout: Rollout) -> Iterable[dict[str, Any]]:
    appended = rollout.design == "appended"
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
                "tokens": span["tokens"],
                "response_id": record.response_id,
            }


def _client_rows(rollout: Rollout) -> Iterable[dict[str, Any]]:
    for record in rollout.records:
        common = {"turn": record.turn, "source": "client", "duration": 0.0, "response_id": record.response_id}
        for stage in CLIENT_INSTANTS:
            moment = {"send": record.sent, "done": record.done}.get(stage, getattr(record, stage, None))
            if moment is not None:
                usage = record.usage or {}
                tokens = usage.get("output_tokens", 0) if stage == "done" else 0
                yield {**common, "stage": stage, "start": moment, "tokens": tokens}
        if record.build is not None:
            start, end = record.build
            yield {**common, "stage": "build", "start": start, "duration": end - start, "tokens": 0}
        for tool in record.tools:
            yield {
                **common,
                "stage": "tool",
                "start": tool.start,
                "duration": tool.end - tool.start,
                "tokens": 0,
            }


def rollout_frame(rollout: Rollout) -> pd.DataFrame:
    rows = [*_server_rows(rollout), *_client_rows(rollout)]
    frame = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "design" and c != "bucket"])
    frame.insert(0, "design", rollout.design)
    frame.insert(3, "bucket", frame["stage"].map(bucket_of))
    frame["t"] = frame["start"] - frame.loc[frame["stage"] == "send", "start"].min()
    return frame.sort_values(["turn", "start"], kind="stable").reset_index(drop=True)
