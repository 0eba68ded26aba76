"""``response.inject``: input for a response that is still running, and the events that answer it.

The official SDK's ``responses_multi_agent=v1`` beta (``client.beta.responses.connect()``, then
``connection.response.inject(response_id=..., input=[...])``) sends, on a WebSocket connection
whose upgrade carried ``OpenAI-Beta: responses_multi_agent=v1``::

    {"type": "response.inject", "response_id": "resp_…", "input": [{"type": "function_call_output", …}]}

Only those three fields: the target response decides the lane, as for a steer. Each item is an
input item, checked as a create's. The answers:

- ``response.inject.created``: every item was validated and committed to the response (it is
  one of the response's events, numbered in its sequence: ``ResponseEvents.inject_created``);
- ``response.inject.failed``: the response has finished (``response_already_completed``) or is
  none this connection runs (``response_not_found``); the input comes back as it was sent (an
  empty list if its JSON is past the server's echo bound, the message saying so:
  ``labkit.api.echo``), and the event is numbered in the connection's own sequence, with the
  steering events.

An item the checks refuse (malformed, an output that answers no call, a compaction item sealed
for another key) is answered as it would be in a create: an ``error`` event that names it. The
SDK's ``response.inject.failed`` has codes for the response's state only. Nothing of that
inject is committed, and the response keeps waiting.

    >>> speaks_inject("responses_multi_agent=v1"), speaks_inject("assistants=v2"), speaks_inject(None)
    (True, False, False)
    >>> parse_inject({"type": "response.inject", "response_id": "resp_1", "input": []})
    ('resp_1', [])
    >>> answered([{"type": "function_call_output", "call_id": "call_1", "output": "ok"}])
    {'call_1'}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labkit.api import echo
from labkit.api import event_types as types
from labkit.api.errors import invalid_request
from labkit.api.items import Item
from labkit.api.requests import parse_item

BETA_HEADER = "openai-beta"  # the upgrade's header that opts a connection into a beta
MULTI_AGENT_BETA = "responses_multi_agent=v1"  # the beta that has response.inject

# The error codes of ``response.inject.failed`` (the SDK's, a closed set).
RESPONSE_NOT_FOUND = "response_not_found"
RESPONSE_ALREADY_COMPLETED = "response_already_completed"

FIELDS = frozenset({"type", "response_id", "input"})


def speaks_inject(header: str | None) -> bool:
    """Whether an upgrade's ``OpenAI-Beta`` header (a comma-separated list) names the beta."""
    return header is not None and MULTI_AGENT_BETA in {part.strip().lower() for part in header.split(",")}


def parse_inject(payload: dict[str, Any]) -> tuple[str, list[Any]]:
    """The target's id and the input as it was sent, each item checked as a create's item is
    (an ``APIError`` naming what is wrong, answered as an ``error`` event)."""
    extra = sorted(set(payload) - FIELDS)
    if extra:
        lane = " (the target response decides the lane)" if extra[0] == "stream_id" else ""
        raise invalid_request(
            f"response.inject accepts only 'type', 'response_id' and 'input', not {extra[0]!r}{lane}.",
            param=extra[0],
            code="unknown_parameter",
        )
    target = payload.get("response_id")
    if not isinstance(target, str) or not target:
        missing = target is None
        raise invalid_request(
            "Missing required parameter: 'response_id'."
            if missing
            else "Invalid 'response_id': expected the id of a response (a non-empty string).",
            param="response_id",
            code="missing_required_parameter" if missing else "invalid_type",
        )
    raw = payload.get("input")
    if not isinstance(raw, list):
        missing = raw is None
        raise invalid_request(
            "Missing required parameter: 'input'."
            if missing
            else "Invalid type for 'input': expected a list of input items.",
            param="input",
            code="missing_required_parameter" if missing else "invalid_type",
        )
    for i, item in enumerate(raw):
        parse_item(item, f"input[{i}]")
    return target, raw


def answered(items: Iterable[Item]) -> set[str]:
    """The calls that these items answer (their tool outputs' ``call_id``)."""
    return {str(i.get("call_id")) for i in items if i.get("type") == "function_call_output"}


def failed(
    code: str,
    message: str,
    response_id: str,
    raw_input: list[Any],
    number: int,
    stream_id: str | None,
    *,
    echo_limit: int,
) -> dict[str, Any]:
    """``response.inject.failed``: why the input was not committed, and the input as it was sent
    if its JSON fits in ``echo_limit`` characters (the lane's ``stream_id`` when the response ran
    on a named one).

    >>> failed("response_not_found", "No such response.", "resp_1", [{"type": "x"}] * 99, 0, None,
    ...        echo_limit=100)["input"]
    []
    """
    sent = echo.size(raw_input)
    shown = raw_input if sent <= echo_limit else []
    if sent > echo_limit:
        message = f"{message} {echo.not_returned(sent, echo_limit)}"
    event: dict[str, Any] = {
        "type": types.INJECT_FAILED,
        "error": {"code": code, "message": message},
        "input": shown,
        "response_id": echo.clip(response_id, echo.MAX_ID_CHARS),
        "sequence_number": number,
    }
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event
