"""Turns built with ``ResponseEvents`` alone, no server: what the event and SSE tests read, and the
official SDK's parser for one stream event."""

from __future__ import annotations

from typing import Any

from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from labkit.api.events import ResponseEvents
from labkit.api.requests import parse_create
from labkit.api.responses import new_response, usage

SDK_EVENT = TypeAdapter(ResponseStreamEvent)


def fresh_response(**body: Any) -> dict[str, Any]:
    return new_response(
        "resp_1", parse_create({"model": "labkit-spark", "input": "hi", **body}), "labkit-spark"
    )


def text_turn() -> tuple[list[dict], ResponseEvents]:
    ev = ResponseEvents(fresh_response())
    events = [*ev.start(), *ev.begin_message("msg_1")]
    events += [ev.delta(chunk) for chunk in ("Hel", "lo, ", "world\n✓")]
    events += ev.end_item()
    events.append(ev.finish("completed", usage(12, 0, 3)))
    return events, ev
