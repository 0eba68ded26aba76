"""The chat template: instructions, tools and conversation items into token ids.

Every block is ``<|im_start|>{header}<|im_sep|>{body}<|im_end|>``. Because
special tokens separate every header and body, each piece of text is
tokenized independently of its neighbours, so a conversation can be rendered once and
then *appended to* item by item, giving exactly the ids a full re-render gives.
That is what lets a connection-scoped cache skip re-tokenizing history.

    >>> buf = TokenBuffer.start("Be brief.", tools=[])
    >>> n = buf.append([{"type": "message", "role": "user", "content": "hi"}])
    >>> buf.ids == encode_rendered(render_conversation("Be brief.", [], [
    ...     {"type": "message", "role": "user", "content": "hi"}]))
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.api.compaction import summary_text
from labkit.engine.tokenizer import (
    IM_END,
    IM_SEP,
    IM_START,
    SPECIAL_TOKENS,
    encode_text,
    encoding,
    special,
)

Item = dict[str, Any]

# ---------------------------------------------------------------- item -> (header, body)


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts joined.

    >>> content_text([{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}])
    'ab'
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text")
            parts.append(text if isinstance(text, str) else json.dumps(part, sort_keys=True))
        else:
            parts.append(str(part))
    return "".join(parts)


def item_block(item: Item) -> tuple[str, str]:
    """The header and body an item renders to.

    >>> item_block({"type": "function_call_output", "call_id": "call_1", "output": "ok"})
    ('tool call_id=call_1', 'ok')
    """
    kind = item.get("type", "message")
    if kind == "message":
        return str(item.get("role", "user")), content_text(item.get("content"))
    if kind == "function_call":
        header = f"assistant to=functions.{item.get('name')} call_id={item.get('call_id')}"
        return header, str(item.get("arguments", ""))
    if kind == "function_call_output":
        return f"tool call_id={item.get('call_id')}", content_text(item.get("output"))
    if kind == "reasoning":
        summary = item.get("summary") or []
        return "assistant reasoning", content_text(summary)
    if kind == "compaction":
        # The summary it carries, not its sealed text: the replaced window in far fewer tokens,
        # and the same tokens every time, so the prefix cache still holds what follows.
        return "compaction", summary_text(item)
    body = {k: v for k, v in item.items() if k not in ("id", "status")}
    return str(kind), json.dumps(body, sort_keys=True)


# ---------------------------------------------------------------- tools -> a namespace


def _ts_type(schema: Any) -> str:
    """A TypeScript-like type for a JSON schema, e.g. ``{"type": "string"} -> 'string'``."""
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"]) or "never"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts_type({**schema, "type": k}) for k in kind)
    if kind == "object":
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        fields = [f"{name}{'' if name in required else '?'}: {_ts_type(sub)}" for name, sub in props.items()]
        return "{" + ", ".join(fields) + "}"
    if kind == "array":
        return f"{_ts_type(schema.get('items'))}[]"
    if kind == "integer":
        return "number"
    return kind if isinstance(kind, str) else "any"


def tool_namespace(tools: Sequence[Item]) -> str:
    """Function tools as a ``namespace functions`` of signatures; other tools as JSON.

    >>> print(tool_namespace([{"type": "function", "name": "ls", "description": "List files.",
    ...     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]))
    namespace functions {
    // List files.
    type ls = (_: {path?: string}) => any;
    } // namespace functions
    """
    lines = ["namespace functions {"]
    others = []
    for tool in tools:
        if tool.get("type") != "function":
            others.append(tool)
            continue
        if tool.get("description"):
            lines.extend(f"// {line}" for line in str(tool["description"]).splitlines())
        lines.append(f"type {tool.get('name')} = (_: {_ts_type(tool.get('parameters'))}) => any;")
    lines.append("} // namespace functions")
    lines.extend(json.dumps(tool, sort_keys=True) for tool in others)
    return "\n".join(lines)


def system_block(instructions: str | None, tools: Sequence[Item]) -> tuple[str, str]:
    body = instructions or ""
    if tools:
        body += "\n\n# Tools\n\n" + tool_namespace(tools)
    return "system", body


def header_key(instructions: str | None, tools: Sequence[Item]) -> str:
    """A digest of what the system block depends on: equal keys, equal system blocks."""
    raw = json.dumps([instructions or "", list(tools)])  # key order matters: it is rendered
    return hashlib.sha256(raw.encode()).hexdigest()


# ---------------------------------------------------------------- two ways to tokenize


def render_conversation(instructions: str | None, tools: Sequence[Item], items: Iterable[Item]) -> str:
    """The whole conversation as one string with special-token markup (the oracle's input)."""
    blocks = [system_block(instructions, tools), *(item_block(i) for i in items)]
    return "".join(f"{IM_START}{header}{IM_SEP}{body}{IM_END}" for header, body in blocks)


def encode_rendered(text: str) -> list[int]:
    """Tokenize a full rendering at once, markup recognised as special tokens."""
    return encoding().encode(text, allowed_special=set(SPECIAL_TOKENS))


def encode_block(header: str, body: str | list[int]) -> list[int]:
    """One block's ids; header and body are ordinary text (or the body's ids, already sampled)."""
    body_ids = encode_text(body) if isinstance(body, str) else body
    return [special(IM_START), *encode_text(header), special(IM_SEP), *body_ids, special(IM_END)]


GENERATION_PROMPT = [special(IM_START), *encode_text("assistant")]


@dataclass
class TokenBuffer:
    """A rendered conversation kept as token ids, which grows by appending items.

    ``encoded`` counts the tokens this buffer's owner had the tokenizer produce:
    the work a cached buffer saves is the work it never adds here.
    """

    key: str
    ids: list[int] = field(default_factory=list)
    items: int = 0
    encoded: int = 0
    # Prefix-cache block keys of ``ids`` (another reusable artifact: a follow-up hashes only new blocks).
    block_keys: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, instructions: str | None, tools: Sequence[Item]) -> TokenBuffer:
        ids = encode_block(*system_block(instructions, tools))
        return cls(key=header_key(instructions, tools), ids=ids, encoded=len(ids))

    def append(self, items: Iterable[Item]) -> int:
        """Render and append items; returns how many tokens were encoded."""
        added = 0
        for item in items:
            block = encode_block(*item_block(item))
            self.ids.extend(block)
            self.items += 1
            added += len(block)
        self.encoded += added
        return added

    def append_sampled(self, item: Item, body_ids: list[int]) -> int:
        """Append an output item from the ids the model sampled: only markup and header are new work."""
        block = encode_block(item_block(item)[0], body_ids)
        self.ids.extend(block)
        self.items += 1
        added = len(block) - len(body_ids)
        self.encoded += added
        return added

    def fork(self) -> TokenBuffer:
        """A copy to extend, with its work counter at zero (the cached tokens cost nothing)."""
        return TokenBuffer(
            key=self.key, ids=list(self.ids), items=self.items, encoded=0, block_keys=list(self.block_keys)
        )

    def prompt(self) -> list[int]:
        """The ids the model is run on: the conversation plus the assistant's turn opener."""
        return self.ids + GENERATION_PROMPT
