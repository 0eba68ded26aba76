"""What a refusal sends back of what the client sent: a bounded number of bytes, whatever was sent.

A WebSocket client may send up to ``--max-frame-bytes`` (2 MiB) in one frame, and whatever a
refusal quotes of it goes to the client like any event, counted against what the client may
leave unread (``--max-unread-bytes``, 1 MiB). A refusal that quoted a 1.2 MB input whole
would, by itself, put the connection past that bound and cut every response running on it.
So a refusal is bounded on every side:

- the input a ``response.steer.failed`` or ``response.inject.failed`` returns is returned only
  if its JSON fits in the server's echo bound (``fits``; ``ServerLimits.max_echo_bytes``);
  otherwise the event returns an empty input and its message says why (the client still holds
  what it sent);
- an id the client named is returned as sent up to ``MAX_ID_CHARS`` characters (``clip``): no
  response's id is longer;
- an error's message and param, which may quote an event type, a key or an id the client sent,
  are clipped to ``MAX_MESSAGE_CHARS`` (``bounded``).

    >>> fits("Stop.", limit=100), fits("x" * 200, limit=100)
    (True, False)
"""

from __future__ import annotations

from typing import Any

from labkit.api import safejson

MAX_MESSAGE_CHARS = 1024  # an error's message (or param) in a refusal, at most
MAX_ID_CHARS = 256  # an id a refusal returns as the client sent it, at most
CUT = "…"  # marks where a clipped text was cut


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the cut marked.

    >>> clip("resp_1", 8), clip("x" * 20, 8)
    ('resp_1', 'xxxxxxx…')
    """
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def size(value: Any) -> int:
    """The characters ``value`` takes as JSON on the wire (what the outbox counts).

    >>> size({"a": [1, 2]})
    11
    """
    return len(safejson.dumps(value))


def fits(value: Any, limit: int) -> bool:
    """Whether ``value`` may be returned whole in a refusal: its JSON within ``limit`` characters."""
    return size(value) <= limit


def not_returned(sent: int, limit: int) -> str:
    """The sentence a refusal adds when it does not return the input.

    >>> not_returned(1_200_000, 32_768)
    'The input (1,200,000 bytes) is not returned: past the 32,768 bytes a refusal returns.'
    """
    return f"The input ({sent:,} bytes) is not returned: past the {limit:,} bytes a refusal returns."


def bounded(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with its error's message and param clipped to ``MAX_MESSAGE_CHARS``: an error
    quoting what a client sent (an event type, a key, an id) stays small whatever was sent. An
    event without an error, or with a short one, is returned as it is.

    >>> event = {"type": "error", "error": {"message": "Unsupported event type '" + "x" * 5000 + "'."}}
    >>> len(bounded(event)["error"]["message"])
    1024
    """
    error = event.get("error")
    if not isinstance(error, dict):
        return event
    long = {
        key: clip(value, MAX_MESSAGE_CHARS)
        for key in ("message", "param")
        if isinstance(value := error.get(key), str) and len(value) > MAX_MESSAGE_CHARS
    }
    return {**event, "error": {**error, **long}} if long else event
