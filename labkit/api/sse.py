"""Server-sent events framing: ``event: <type>\\ndata: <json>\\n\\n``.

>>> frame({"type": "response.created", "sequence_number": 0})
b'event: response.created\\ndata: {"type":"response.created","sequence_number":0}\\n\\n'
"""

from __future__ import annotations

import json
from typing import Any


def encode_event(event: dict[str, Any]) -> str:
    """One event as compact JSON, the payload of an SSE frame or a WebSocket text frame."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


def frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {encode_event(event)}\n\n".encode()
