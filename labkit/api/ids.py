"""Object ids in the API's style: a type prefix and a random hex tail, e.g. ``resp_6f1c...``."""

from __future__ import annotations

import secrets

ITEM_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "compaction": "cmp",
}


def new_id(prefix: str) -> str:
    """A fresh id such as ``new_id("resp") -> 'resp_0c9e...'`` (48 hex digits)."""
    return f"{prefix}_{secrets.token_hex(24)}"


def new_item_id(item_type: str) -> str:
    return new_id(ITEM_PREFIX.get(item_type, "item"))
