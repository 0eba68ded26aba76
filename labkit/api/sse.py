"""Server-sent events framing: ``event: <type>\\ndata: <json>\\n\\n``.

>>> frame({"type": "response.created", "sequence_number": 0})
b'event: response.created\\ndata: {"type":"response.created","sequence_number":0}\\n\\n'
"""

from __future__ import annotations

from typing import Any

from labkit.api.safejson import dumps


def encode_event(event: dict[str, Any]) -> str:
    """One event as compact JSON, the payload of an SSE frame or a WebSocket text frame.

    Never ``NaN`` (a ``ValueError`` instead: the caller ends the stream with an error event)
    and never a lone surrogate, which no UTF-8 socket could carry.
    """
    return dumps(event)


def frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {encode_event(event)}\n\n".encode()
