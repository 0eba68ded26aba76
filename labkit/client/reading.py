"""Reading one response's events off a WebSocket, in the two shapes the notebooks drive by hand.

``completed`` reads an official SDK connection (``client.responses.connect()``) until its
response ends; ``until_paused`` reads the prototype's raw wire (``?design=appended``, which no
SDK speaks) until the response pauses for tool outputs or ends, listing what it saw. The events
a notebook wants to show stay in the notebook; these only wait for the end.

    with client.responses.connect() as connection:
        connection.response.create(model="labkit-spark", input="Hello")
        response = completed(connection)
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from labkit.api.event_types import ERROR, RESPONSE_DONE, TERMINAL_EVENT

RESPONSE_COMPLETED = TERMINAL_EVENT["completed"]


class Connection(Protocol):
    """What ``completed`` reads: the SDK's WebSocket connection, iterated for typed events."""

    def __iter__(self) -> Any: ...


class RawSocket(Protocol):
    """What ``until_paused`` reads: a raw WebSocket client whose ``recv`` returns a text frame."""

    def recv(self) -> str | bytes: ...


class ResponseFailed(RuntimeError):
    """The response ended in an error or without completing; the message is the server's.

        try:
            response = completed(connection)
        except ResponseFailed as failure:
            print(failure)   # previous_response_not_found: ...
    """


def completed(connection: Connection) -> Any:
    """The response, once ``response.completed`` arrives; an ``error``, or a response that ends
    any other way (failed, incomplete, cancelled), raises ``ResponseFailed``.

        connection.response.create(model="labkit-spark", input="Hello", store=False)
        response = completed(connection)
    """
    for event in connection:
        if event.type == RESPONSE_COMPLETED:
            return event.response
        if event.type == ERROR:
            raise ResponseFailed(f"{event.error.code}: {event.error.message}")
        if event.type in TERMINAL_EVENT.values():  # failed, incomplete or cancelled
            raise ResponseFailed(f"the response ended {event.response.status}")
    raise ResponseFailed("the connection closed before the response completed")


def until_paused(ws: RawSocket) -> tuple[dict[str, Any], list[str], int]:
    """Read the prototype's wire until the response pauses (``response.done``), completes, or
    errs: that last event, the types seen in order (text deltas left out) and how many deltas.

        pause, kinds, deltas = until_paused(ws)
        pause["pending_calls"]   # what the response waits for
    """
    kinds: list[str] = []
    deltas = 0
    while True:
        event = json.loads(ws.recv())
        if event["type"].endswith(".delta"):
            deltas += 1
            continue
        kinds.append(event["type"])
        if event["type"] in (RESPONSE_DONE, RESPONSE_COMPLETED, ERROR):
            return event, kinds, deltas
