"""The compaction item: one opaque, sealed item that stands in for a window of conversation.

``POST /v1/responses/compact`` keeps a window's user messages and replaces everything else
(assistant messages, tool calls and their outputs, reasoning, earlier compaction items) by
one item::

    {"type": "compaction", "id": "cmp_…", "encrypted_content": "lkc1.<payload>.<seal>"}

Clients must treat ``encrypted_content`` as opaque. labkit's is sealed, not encrypted: the
payload is base64url JSON, and the seal an HMAC over it keyed by the owner (the digest of
the API key). So an item works only for the key that made it and cannot be altered, while
a learner can still decode it to see what the model reads. A new item's seal is checked
before its payload is read, and the payload is parsed as strictly as a request body (no
``Infinity``, no deep nesting), so a forged item is refused, never a crash. The payload holds what the
server needs to expand the item: the ``summary`` the model reads instead of the window, the
``calls`` it stands for (tool outputs answering them stay valid), how many of them answered
the window's last user message (``task_calls``: the model's count of calls for the task goes
on after a compaction), and tallies that add up across re-compactions.

    >>> sealed = seal(Payload("Read two files.", calls=("call_1",)), "key_abc")
    >>> open_payload(sealed).summary
    'Read two files.'
    >>> verify(sealed, "key_abc") is not None, verify(sealed, "key_other")
    (True, None)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.api import safejson
from labkit.api.errors import APIError, invalid_request

PREFIX = "lkc1"  # the format's version: a later format can still open (and refuse) this one
OBJECT = "response.compaction"
# A tally larger than any real window: a payload beyond it was not written by ``seal``.
MAX_COUNT = 2**53


@dataclass(frozen=True)
class Payload:
    """What a compaction item carries. ``items`` and ``tokens`` count what it replaced."""

    summary: str
    calls: tuple[str, ...] = ()
    items: int = 0
    tokens: int = 0
    tools: dict[str, int] = field(default_factory=dict)  # function calls replaced, by name
    task_calls: int = 0  # of ``calls``, those made since the window's last user message

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "calls": list(self.calls),
            "items": self.items,
            "tokens": self.tokens,
            "tools": self.tools,
            "task_calls": self.task_calls,
        }


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(owner: str, body: str) -> str:
    # A per-owner key: an item made for one API key does not verify for another.
    key = hashlib.sha256(b"labkit compaction seal\0" + owner.encode()).digest()
    return _b64(hmac.new(key, f"{PREFIX}.{body}".encode(), hashlib.sha256).digest())


def seal(payload: Payload, owner: str) -> str:
    """The ``encrypted_content`` of a compaction item: deterministic for a payload and owner."""
    body = _b64(json.dumps(payload.to_json(), sort_keys=True, separators=(",", ":")).encode())
    return f"{PREFIX}.{body}.{_mac(owner, body)}"


def _parts(content: Any) -> tuple[str, str] | None:
    """The body and seal of a labkit compaction's ``encrypted_content`` (None for anything else)."""
    # Both parts are base64url: a non-ASCII character means it is not labkit's (and cannot be hashed).
    if not isinstance(content, str) or not content.isascii() or content.count(".") != 2:
        return None
    prefix, body, mac = content.split(".")
    return (body, mac) if prefix == PREFIX and body else None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _as_payload(raw: Any) -> Payload | None:
    """The payload a parsed body describes, if it has the shape ``seal`` writes (None otherwise)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("summary"), str):
        return None
    calls, tools = raw.get("calls", []), raw.get("tools", {})
    items, tokens, task_calls = raw.get("items", 0), raw.get("tokens", 0), raw.get("task_calls", 0)
    if not (isinstance(calls, list) and all(isinstance(call, str) for call in calls)):
        return None
    if not (isinstance(tools, dict) and all(map(_is_count, [items, tokens, task_calls, *tools.values()]))):
        return None
    return Payload(
        raw["summary"],
        calls=tuple(calls),
        items=items,
        tokens=tokens,
        tools=dict(tools),
        task_calls=task_calls,
    )


def _payload(body: str) -> Payload | None:
    """The payload of a body, parsed as strictly as a request body (``labkit.api.safejson``)."""
    try:
        raw = safejson.loads(_unb64(body), what="the compaction payload")
    except (APIError, binascii.Error, ValueError):  # not base64, or not JSON labkit would accept
        return None
    return _as_payload(raw)


def open_payload(content: Any) -> Payload | None:
    """The payload, without checking the seal (None if it is not a labkit compaction).

    Only for items already verified (the history, a window being compacted); ``verify`` is
    the check for new ones.
    """
    parts = _parts(content)
    return _payload(parts[0]) if parts is not None else None


def verify(content: Any, owner: str) -> Payload | None:
    """The payload if the seal holds for this owner, else None.

    The seal is checked first: a payload is parsed only once it is known to be labkit's.
    """
    parts = _parts(content)
    if parts is None:
        return None
    body, mac = parts
    if not hmac.compare_digest(mac, _mac(owner, body)):
        return None
    return _payload(body)


def summary_text(item: dict[str, Any]) -> str:
    """What a compaction item renders to: its summary ('' for content labkit cannot open).

    >>> summary_text({"type": "compaction", "encrypted_content": seal(Payload("Done."), "o")})
    'Done.'
    """
    payload = open_payload(item.get("encrypted_content"))
    return payload.summary if payload is not None else ""


def vouched_calls(item: dict[str, Any]) -> tuple[str, ...]:
    """The call ids a compaction item stands for: every function call of the window it replaced."""
    payload = open_payload(item.get("encrypted_content"))
    return payload.calls if payload is not None else ()


def task_calls(item: dict[str, Any]) -> int:
    """How many calls a compaction item stands for that answered the last user message of the
    window it replaced (0 for content labkit cannot open)."""
    payload = open_payload(item.get("encrypted_content"))
    return payload.task_calls if payload is not None else 0


def is_user_message(item: dict[str, Any]) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"


def without_replaced(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """An input as the model reads it: the items before its latest compaction item, but the user
    messages, are what that item replaced, so they are left out.

    A client that chains statelessly appends each response's output to the history it sends,
    the compaction item included, as the API's compaction guide asks (the Vercel AI SDK does):
    the window it sends then holds both the items a compaction replaced and the item itself.
    Read this way, it is the window a follow-up by ``previous_response_id`` continues (the user
    messages, the compaction item, what came after), so the input shrinks once compacted. A
    window from ``POST /v1/responses/compact`` (its user messages, then the item) is unchanged.

    >>> user = {"type": "message", "role": "user", "content": "Fix it."}
    >>> call = {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"}
    >>> done = {"type": "function_call_output", "call_id": "call_1", "output": "a.py"}
    >>> item = {"type": "compaction", "encrypted_content": "lkc1.…"}
    >>> [i["type"] for i in without_replaced([user, call, done, item, call, done])]
    ['message', 'compaction', 'function_call', 'function_call_output']
    """
    latest = max((i for i, item in enumerate(items) if item.get("type") == "compaction"), default=None)
    if latest is None:
        return list(items)
    return [item for item in items[:latest] if is_user_message(item)] + list(items[latest:])


def verify_compactions(items: Iterable[dict[str, Any]], owner: str) -> None:
    """Refuse a compaction item this owner did not get from labkit (another key's, or altered)."""
    for i, item in enumerate(items):
        if item.get("type") == "compaction" and verify(item.get("encrypted_content"), owner) is None:
            raise invalid_encrypted_content(str(item.get("id") or f"input[{i}]"), f"input[{i}]")


def invalid_encrypted_content(item_id: str, path: str) -> APIError:
    return invalid_request(
        f"The encrypted content for item {item_id} could not be verified.",
        param=f"{path}.encrypted_content",
        code="invalid_encrypted_content",
    )
