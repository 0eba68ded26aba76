"""``response.steer``: user input for a running response, and the three events that answer it.

A client on a WebSocket connection may send, while a response runs::

    {"type": "response.steer", "previous_response_id": "resp_…", "input": "Also run the linter."}

Only those three fields; ``input`` is a string or a non-empty list of ``user`` messages, each
with only ``type`` (``message``, optional), ``role`` and ``content`` (a string or a list of
``input_text``, ``input_image`` and ``input_file`` parts). ``parse_steer`` checks it; the
connection decides what becomes of it (``labkit.server.wscore.connection``). The answers:

- ``response.steer.accepted``: validated and queued, with the id it was given;
- ``response.steer.pending``: the target stopped for client-owned tool output, so the input
  waits for the client's next ``response.create`` on that parent (``required_input`` names the
  calls to answer);
- ``response.steer.failed``: refused or not committed, the input returned as it was sent, in
  the shape the SDK's event type takes (user messages given their ``type``). A refusal costs a
  bounded number of bytes (``labkit.api.echo``): an input that is not steering input, or whose
  JSON is past the server's echo bound, comes back empty, and the message says why.

Steering events are numbered in a sequence of their own per connection (the SDK leaves it
open): they are not part of any one response's events.

    >>> parse_steer({"type": "response.steer", "previous_response_id": "resp_1", "input": "Stop."})
    ('resp_1', [{'type': 'message', 'role': 'user', 'content': 'Stop.'}])
    >>> parse_steer({"type": "response.steer", "previous_response_id": "resp_1", "input": []})
    Traceback (most recent call last):
    labkit.api.steering.SteerRefused: 'input' must be a string or a non-empty list of user messages.
"""

from __future__ import annotations

from typing import Any

from labkit.api import echo
from labkit.api import event_types as types
from labkit.api.items import Item

# The error codes of ``response.steer.failed`` (the SDK's ``ResponseSteerErrorCode``).
RESPONSE_NOT_FOUND = "response_not_found"
INVALID_INPUT = "invalid_input"
STEERING_NOT_SUPPORTED = "steering_not_supported"
TOO_MANY_PENDING_STEERS = "too_many_pending_steers"
RESPONSE_ALREADY_COMPLETED = "response_already_completed"
RESPONSE_NOT_ACTIVE = "response_not_active"
SUCCESSOR_CREATION_FAILED = "successor_creation_failed"

WAITING_FOR_REQUIRED_INPUT = "waiting_for_required_input"  # the reason of response.steer.pending
STEERED = "steered"  # incomplete_details.reason of a response that stopped for steering

FIELDS = frozenset({"type", "previous_response_id", "input"})
MESSAGE_FIELDS = frozenset({"type", "role", "content"})
PART_TYPES = frozenset({"input_text", "input_image", "input_file"})


class SteerRefused(Exception):
    """A steer that cannot be accepted: its ``code`` is one of the codes above."""

    def __init__(self, message: str, code: str = INVALID_INPUT) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def parse_steer(payload: dict[str, Any]) -> tuple[str, list[Item]]:
    """The target's id and the steering input as items; ``SteerRefused`` (``invalid_input``)
    if the event is not one the API accepts."""
    extra = sorted(set(payload) - FIELDS)
    if extra:
        raise SteerRefused(
            f"response.steer accepts only 'type', 'previous_response_id' and 'input', not {extra[0]!r}"
            + (" (the target response decides the lane)." if extra[0] == "stream_id" else ".")
        )
    target = payload.get("previous_response_id")
    if not isinstance(target, str) or not target:
        raise SteerRefused("'previous_response_id' must name the response to steer.")
    return target, parse_input(payload.get("input"))


def parse_input(raw: Any) -> list[Item]:
    """Steering input as items; ``SteerRefused`` (``invalid_input``) if it is none.

    >>> parse_input([{"role": "user", "content": "Stop."}])
    [{'type': 'message', 'role': 'user', 'content': 'Stop.'}]
    """
    if isinstance(raw, str) and raw:
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise SteerRefused("'input' must be a string or a non-empty list of user messages.")
    return [_message(item, f"input[{i}]") for i, item in enumerate(raw)]


def _message(item: Any, where: str) -> Item:
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        raise SteerRefused(f"'{where}' must be a user message: steering takes no other item type.")
    extra = sorted(set(item) - MESSAGE_FIELDS)
    if extra:
        raise SteerRefused(f"'{where}' may hold only 'type', 'role' and 'content', not {extra[0]!r}.")
    if item.get("role") != "user":
        raise SteerRefused(f"'{where}.role' must be 'user': steering input is the user's.")
    content = item.get("content")
    if isinstance(content, str):
        return {"type": "message", "role": "user", "content": content}
    if not isinstance(content, list) or not content:
        raise SteerRefused(f"'{where}.content' must be a string or a non-empty list of parts.")
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in PART_TYPES:
            raise SteerRefused(
                f"'{where}.content[{j}]' must be an input_text, input_image or input_file part."
            )
        if kind == "input_text" and not isinstance(part.get("text"), str):
            raise SteerRefused(f"'{where}.content[{j}].text' must be a string.")
    return {"type": "message", "role": "user", "content": content}


def _lane(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def accepted(steer_id: str, target: str, number: int, stream_id: str | None) -> dict[str, Any]:
    """``response.steer.accepted``: the server owns the input now (not yet applied)."""
    steer = {"id": steer_id, "previous_response_id": target}
    return _lane({"type": types.STEER_ACCEPTED, "steer": steer, "sequence_number": number}, stream_id)


def pending(
    steer_id: str, target: str, calls: list[Item], number: int, stream_id: str | None
) -> dict[str, Any]:
    """``response.steer.pending``: the input waits for the client's tool results; ``calls`` are
    the target's client-owned function calls, named in ``required_input`` stubs."""
    stubs = [{"type": "function_call_output", "call_id": c["call_id"], "name": c["name"]} for c in calls]
    event = {
        "type": types.STEER_PENDING,
        "reason": WAITING_FOR_REQUIRED_INPUT,
        "required_input": stubs,
        "steer": {"id": steer_id, "previous_response_id": target},
        "sequence_number": number,
    }
    return _lane(event, stream_id)


def returned(raw_input: Any, limit: int) -> tuple[Any, str | None]:
    """What a ``response.steer.failed`` returns of the input, and why, if not all of it: the
    input as sent when it is steering input (a string, or user messages given their ``type``, as
    the SDK's event type requires) and its JSON fits in ``limit``; an empty string otherwise.

    >>> returned([{"role": "user", "content": "Stop."}], limit=1000)
    ([{'type': 'message', 'role': 'user', 'content': 'Stop.'}], None)
    >>> returned([{"role": "assistant", "content": "I will."}], limit=1000)
    ('', 'The input is not returned: it is not steering input.')
    """
    try:
        items = parse_input(raw_input)
    except SteerRefused:
        return "", "The input is not returned: it is not steering input."
    shaped = raw_input if isinstance(raw_input, str) else items
    sent = echo.size(shaped)
    if sent > limit:
        return "", echo.not_returned(sent, limit)
    return shaped, None


def failed(
    code: str,
    message: str,
    target: Any,
    raw_input: Any,
    number: int,
    *,
    steer_id: str | None = None,
    stream_id: str | None = None,
    echo_limit: int,
) -> dict[str, Any]:
    """``response.steer.failed``: the input as it was sent (``returned``: within ``echo_limit``
    characters of JSON), and why it was not committed (its id only if it had been given one)."""
    shown, withheld = returned(raw_input, echo_limit)
    if withheld is not None:
        message = f"{message} {withheld}"
    steer: dict[str, Any] = {
        "input": shown,
        "previous_response_id": echo.clip(target, echo.MAX_ID_CHARS) if isinstance(target, str) else "",
    }
    if steer_id is not None:
        steer["id"] = steer_id
    error = {"code": code, "message": message, "type": "invalid_request_error"}
    return _lane(
        {"type": types.STEER_FAILED, "error": error, "steer": steer, "sequence_number": number}, stream_id
    )
