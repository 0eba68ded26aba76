"""Input items as the API reads them: one pydantic model per item type labkit knows.

Items keep fields they do not know (such as a replayed reasoning item's ``encrypted_content``),
so they round-trip intact; an item type labkit does not model is kept as it came.

>>> ITEM_MODELS["function_call"].model_validate(
...     {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"}).name
'ls'
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# An item as it travels and is stored: its JSON object (the models below read one when checking).
Item = dict[str, Any]


class _Item(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    status: str | None = None


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class MessageItem(_Item):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[dict[str, Any]]


class ReasoningItem(_Item):
    type: Literal["reasoning"]
    summary: list[dict[str, Any]] = Field(default_factory=list)
    encrypted_content: str | None = None


class CompactionItem(_Item):
    """A window replaced by ``POST /v1/responses/compact`` (see ``labkit.api.compaction``)."""

    type: Literal["compaction"]
    encrypted_content: str


class ItemReference(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["item_reference"] = "item_reference"
    id: str


class OtherItem(_Item):
    """An item type labkit does not model (a client's own tool calls): kept as it came."""

    type: str


ITEM_MODELS: dict[str, type[BaseModel]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "reasoning": ReasoningItem,
    "compaction": CompactionItem,
    "item_reference": ItemReference,
}


def replayable(item: Item) -> Item:
    """An output item as a client sends it back in the next request's input: a call's name,
    id and arguments, a message's role and content (the server's ids and statuses left out).

    >>> replayable({"type": "message", "id": "msg_1", "status": "completed", "role": "user", "content": []})
    {'type': 'message', 'role': 'user', 'content': []}
    """
    if item["type"] == "function_call":
        keys: tuple[str, ...] = ("type", "call_id", "name", "arguments")
    else:
        keys = ("type", "role", "content")
    return {key: item[key] for key in keys if key in item}
