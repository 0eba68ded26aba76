"""The compaction item: one opaque, sealed item that stands in for a window of conversation.

``POST /v1/responses/compact`` keeps a window's user messages and replaces everything else
(assistant messages, tool calls and their outputs, reasoning, earlier compaction items) by
one item::

    {"type": "compaction", "id": "cmp_…", "encrypted_content": "lkc1.<payload>.<seal>"}

Clients must treat ``encrypted_content`` as opaque. labkit's is sealed, not encrypted: the
payload is base64url JSON, and the seal an HMAC over it keyed by the owner (the digest of
the API key). So an item works only for the key that made it and cannot be altered, while
a learner can still decode it to see what the model reads. The payload holds what the
server needs to expand the item: the ``summary`` the model reads instead of the window, the
``calls`` it stands for (tool outputs answering them stay valid), and tallies that add up
across re-compactions.

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from labkit.api.errors import APIError, invalid_request

PREFIX = "lkc1"  # the format's version: a later format can still open (and refuse) this one
OBJECT = "response.compaction"


@dataclass(frozen=True)
class Payload:
    """What a compaction item carries. ``items`` and ``tokens`` count what it replaced."""

    summary: str
    calls: tuple[str, ...] = ()
    items: int = 0
    tokens: int = 0
    tools: dict[str, int] = field(default_factory=dict)  # function calls replaced, by name

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "calls": list(self.calls),
            "items": self.items,
            "tokens": self.tokens,
            "tools": self.tools,
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


def open_payload(content: Any) -> Payload | None:
    """The payload, without checking the seal (None if it is not a labkit compaction)."""
    if not isinstance(content, str):
        return None
    prefix, _, rest = content.partition(".")
    body, _, _mac_text = rest.partition(".")
    if prefix != PREFIX or not body:
        return None
    try:
        raw = json.loads(_unb64(body))
        return Payload(
            summary=str(raw["summary"]),
            calls=tuple(str(c) for c in raw.get("calls", [])),
            items=int(raw.get("items", 0)),
            tokens=int(raw.get("tokens", 0)),
            tools={str(k): int(v) for k, v in dict(raw.get("tools", {})).items()},
        )
    except (binascii.Error, ValueError, TypeError, KeyError, AttributeError):
        return None


def verify(content: Any, owner: str) -> Payload | None:
    """The payload if the seal holds for this owner, else None."""
    payload = open_payload(content)
    if payload is None:
        return None
    body, mac = content.split(".")[1:3] if content.count(".") == 2 else ("", "")
    return payload if hmac.compare_digest(mac, _mac(owner, body)) else None


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
