"""A WebSocket connection's lanes: responses in order on a lane, lanes side by side.

A ``stream_id`` names a lane; responses on one lane run in order, lanes run concurrently.
Without ``stream_id`` every create goes to the default lane, which makes the connection
strictly sequential: a create that arrives while one is running waits its turn. Each lane
keeps its most recent response as a ``Conversation``: the connection cache, whose rules
are ``labkit.server.render_cache``'s. A connection has at most ``limits.MAX_LANES`` named
lanes, and ``limits.MAX_IN_FLIGHT`` responses running at once.

With the ``appended`` design, a lane's rollout pauses at each function call and takes
the client's ``response.append`` (``queue_append``).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from labkit.api.errors import invalid_request, rate_limited
from labkit.api.requests import parse_item
from labkit.server.turn import Conversation

STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")


def check_stream_id(stream_id: Any) -> None:
    """Refuse a ``stream_id`` that is not a lane's name (``None`` is the default lane).

    >>> check_stream_id("lane-1"), check_stream_id(None)
    (None, None)
    """
    if stream_id is not None and not (isinstance(stream_id, str) and STREAM_ID.fullmatch(stream_id)):
        raise invalid_request(
            "Invalid 'stream_id': use 1 to 256 characters from A-Z, a-z, 0-9, '_', '.', '-'.",
            param="stream_id",
            code="invalid_stream_id",
        )


@dataclass
class Lane:
    stream_id: str | None
    # Each create: its body, its frame's size, and whether it waits behind another on this lane.
    queue: asyncio.Queue[tuple[dict[str, Any], int, bool]] = field(default_factory=asyncio.Queue)
    busy: bool = False  # a response of this lane is running (or waiting for a slot)
    appends: asyncio.Queue[list[Any]] = field(default_factory=asyncio.Queue)
    in_rollout: bool = False  # an appended rollout is running and takes response.append
    rollout_id: str | None = None  # ... the id of that rollout's response
    cache: Conversation | None = None  # the connection cache: written only when a response finishes
    worker: asyncio.Task[None] | None = None


def queue_append(lanes: dict[str | None, Lane], payload: dict[str, Any], max_queued: int) -> None:
    """labkit extension: tool results for the appended rollout paused on the payload's lane,
    refused (``APIError``) unless that lane's rollout is the one it names and its items are
    items; at most ``max_queued`` appends wait."""
    stream_id = payload.get("stream_id")
    check_stream_id(stream_id)  # a lane key: a list or an object would not even hash
    lane = lanes.get(stream_id)
    if lane is None or not lane.in_rollout:
        raise invalid_request("No response on this connection is waiting for response.append.")
    if payload.get("response_id") != lane.rollout_id:
        raise invalid_request(
            f"Response '{payload.get('response_id')}' is not waiting for response.append on this "
            f"stream; '{lane.rollout_id}' is.",
            param="response_id",
        )
    items = payload.get("input")
    if not isinstance(items, list):
        raise invalid_request("'input' of response.append must be a list of items.", param="input")
    for i, item in enumerate(items):
        parse_item(item, f"input[{i}]")  # refuse bad items now; the rollout keeps waiting
    if lane.appends.qsize() >= max_queued:  # appends sent ahead are kept, up to a point
        raise rate_limited(
            f"Too many appends waiting on this stream (at most {max_queued}).",
            code="websocket_queue_full",
        )
    lane.appends.put_nowait(items)
