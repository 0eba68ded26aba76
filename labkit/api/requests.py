"""Validation of ``response.create`` bodies with pydantic v2.

Unknown fields are ignored; a wrong type or value is an ``APIError`` (400)
naming the offending ``param`` in the API's own path syntax, e.g.
``input[2].call_id`` (``labkit.api.validation``). The items are read by the models of
``labkit.api.items``, a function tool's parameters by ``labkit.api.tool_schema``.

    >>> req = parse_create({"model": "labkit-spark", "input": "hi"})
    >>> req.items
    [{'type': 'message', 'role': 'user', 'content': 'hi'}]
    >>> parse_create({"model": "m", "temperature": "hot"})
    Traceback (most recent call last):
    labkit.api.errors.APIError: Invalid type for 'temperature': expected a number.

``check_new_items`` is the one check that needs the conversation too (a tool output must
answer a call in it); the pipeline runs it once the history is loaded.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from labkit.api.compaction import verify_compactions, vouched_calls
from labkit.api.errors import invalid_request
from labkit.api.items import ITEM_MODELS, OtherItem
from labkit.api.owners import MAX_NAME_CHARS, NAME_KEY, name_problem
from labkit.api.tool_schema import check_schema
from labkit.api.validation import validate

# ---------------------------------------------------------------- tools


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolChoiceFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    name: str | None = None


# ---------------------------------------------------------------- the request

# Service tiers the official SDK can send; labkit serves every request at one tier.
ServiceTier = Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"]


class CreateBody(BaseModel):
    """The fields of a ``response.create`` body that labkit reads; the rest are ignored.

    Strict: a wrong JSON type is an error, never silently converted (``"false"`` is not false).
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    # The specification lets a client send null for these: null means the default.
    tools: list[dict[str, Any]] | None = Field(default_factory=list)
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunction | None = "auto"
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    background: bool | None = None
    generate: bool = True
    max_output_tokens: int | None = Field(default=None, ge=16)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    max_tool_calls: int | None = Field(default=None, ge=1)
    service_tier: ServiceTier | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = True
    # Past the model's window: "auto" drops the oldest items, else a 400
    # (labkit.server.stages.context_window).
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    user: str | None = None
    safety_identifier: str | None = None
    # Read so that they are refused or acted on, never silently ignored (``parse_create``).
    conversation: Any = None
    context_management: list[Any] | None = None

    @model_validator(mode="after")
    def _nulls_are_defaults(self) -> CreateBody:
        self.tools = [] if self.tools is None else self.tools
        self.tool_choice = "auto" if self.tool_choice is None else self.tool_choice
        self.parallel_tool_calls = True if self.parallel_tool_calls is None else self.parallel_tool_calls
        return self


class CreateRequest:
    """A validated create request: the body's fields plus normalized items and tools, and
    ``compaction``: whether the response compacts first once its prompt is past a threshold
    (``context_management``), and that threshold if the request gave one."""

    def __init__(
        self,
        body: CreateBody,
        items: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        compaction: Compaction | None = None,
    ):
        self.body = body
        self.items = items
        self.tools = tools
        self.compaction = compaction

    def __getattr__(self, name: str) -> Any:
        return getattr(self.body, name)

    @property
    def tool_choice_wire(self) -> Any:
        choice = self.body.tool_choice
        return choice.model_dump(exclude_none=True) if isinstance(choice, ToolChoiceFunction) else choice


class CompactBody(BaseModel):
    """The body of ``POST /v1/responses/compact``: a window to compact, given or stored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    input: str | list[dict[str, Any]] | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    prompt_cache_key: str | None = None
    # Read as a create reads them (the same types, the same errors) and echoed in the answer.
    safety_identifier: str | None = None
    service_tier: ServiceTier | None = None


class CompactRequest:
    """A validated compact request: the body's fields plus its normalized input items."""

    def __init__(self, body: CompactBody, items: list[dict[str, Any]]):
        self.body = body
        self.items = items

    def __getattr__(self, name: str) -> Any:
        return getattr(self.body, name)


def parse_item(raw: Any, param: str) -> dict[str, Any]:
    """One input item, validated and dumped back to plain JSON."""
    if not isinstance(raw, dict):
        raise invalid_request(
            f"Invalid type for '{param}': expected an object.", param=param, code="invalid_type"
        )
    kind = raw.get("type")
    if kind is None:
        kind = "message" if "role" in raw else "item_reference" if "id" in raw else None
    if kind is None:
        raise invalid_request(
            f"Missing required parameter: '{param}.type'.",
            param=f"{param}.type",
            code="missing_required_parameter",
        )
    if not isinstance(kind, str):
        raise invalid_request(
            f"Invalid type for '{param}.type': expected a string.",
            param=f"{param}.type",
            code="invalid_type",
        )
    model = ITEM_MODELS.get(kind, OtherItem)
    item = validate(model, {**raw, "type": kind}, param)
    return item.model_dump(exclude_none=True)


def parse_tool(raw: Any, param: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise invalid_request(
            f"Invalid value for '{param}': a tool is an object with a string 'type'.",
            param=param,
            code="invalid_value",
        )
    if raw["type"] != "function":
        return raw  # hosted and client-specific tools (namespace, web_search, ...) pass through
    tool = validate(FunctionTool, raw, param)
    if tool.parameters is not None:
        check_schema(tool.parameters, f"{param}.parameters", tool.name)
    return tool.model_dump(exclude_none=True)


def _parse_input(raw: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return [parse_item(raw_item, f"input[{i}]") for i, raw_item in enumerate(raw or [])]


def parse_create(raw: Any) -> CreateRequest:
    """Validate a whole create body; raises ``APIError`` on the first problem."""
    if not isinstance(raw, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    body = validate(CreateBody, raw)
    if body.conversation is not None:
        raise invalid_request(
            "labkit does not support 'conversation': it keeps no conversation objects. "
            "Chain responses with 'previous_response_id' instead.",
            param="conversation",
            code="unsupported_parameter",
        )
    items = _parse_input(body.input)
    tools = [parse_tool(raw_tool, f"tools[{i}]") for i, raw_tool in enumerate(body.tools or [])]
    if body.metadata is not None:
        check_metadata(body.metadata)
    return CreateRequest(body, items, tools, compaction(body.context_management))


@dataclass(frozen=True)
class Compaction:
    """``context_management``'s compaction: past ``threshold`` prompt tokens the response compacts
    first. Without one, the model's own (``ModelSpec.compact_threshold``: a share of its input
    limit, labkit's choice, as the SDK leaves it to the server)."""

    threshold: int | None = None


def compaction(entries: list[Any] | None) -> Compaction | None:
    """``context_management``'s one ``compaction`` entry, or None. Any other entry type is refused.

    >>> compaction([{"type": "compaction", "compact_threshold": 5000}]), compaction([{"type": "compaction"}])
    (Compaction(threshold=5000), Compaction(threshold=None))
    >>> compaction([{"type": "truncation"}])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    labkit.api.errors.APIError: Invalid value for 'context_management[0].type': ... only 'compaction'.
    """
    found = None
    for i, entry in enumerate(entries or []):
        param = f"context_management[{i}]"
        if not isinstance(entry, dict):
            raise invalid_request(
                f"Invalid type for '{param}': expected an object.", param=param, code="invalid_type"
            )
        kind = entry.get("type")
        if not isinstance(kind, str):
            raise invalid_request(
                f"Missing required parameter: '{param}.type'.",
                param=f"{param}.type",
                code="missing_required_parameter",
            )
        if kind != "compaction":
            raise invalid_request(
                f"Invalid value for '{param}.type': '{kind}' is not supported; labkit supports "
                "only 'compaction'.",
                param=f"{param}.type",
                code="invalid_value",
            )
        if found is not None:
            raise invalid_request(
                f"Invalid value for '{param}': only one 'compaction' entry is allowed.",
                param=param,
                code="invalid_value",
            )
        value = entry.get("compact_threshold")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise invalid_request(
                f"Invalid value for '{param}.compact_threshold': expected a positive integer.",
                param=f"{param}.compact_threshold",
                code="invalid_value",
            )
        found = Compaction(value)
    return found


# The OpenAI API's limits on metadata: 16 pairs, keys up to 64 characters, values up to 512.
MAX_METADATA_KEYS, MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS = 16, 64, 512


def check_metadata(metadata: dict[str, str]) -> None:
    if len(metadata) > MAX_METADATA_KEYS:
        raise invalid_request(
            f"Invalid 'metadata': too many keys (at most {MAX_METADATA_KEYS}).",
            param="metadata",
            code="invalid_value",
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise invalid_request(
                f"Invalid 'metadata': a key is {len(key)} characters (at most {MAX_METADATA_KEY_CHARS}).",
                param="metadata",
                code="invalid_value",
            )
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise invalid_request(
                f"Invalid 'metadata.{key}': {len(value)} characters (at most {MAX_METADATA_VALUE_CHARS}).",
                param=f"metadata.{key}",
                code="invalid_value",
            )
    name = metadata.get(NAME_KEY)
    if name is not None and (problem := name_problem(name)):
        raise invalid_request(
            f"Invalid 'metadata.{NAME_KEY}': {problem}; a learner's name is 1 to {MAX_NAME_CHARS} "
            "printable characters.",
            param=f"metadata.{NAME_KEY}",
            code="invalid_value",
        )


def parse_compact(raw: Any) -> CompactRequest:
    """Validate a compact body: a model, and a window (``input``, ``previous_response_id`` or both).

    >>> parse_compact({"input": "hi"})
    Traceback (most recent call last):
    labkit.api.errors.APIError: Missing required parameter: 'model'.
    """
    if not isinstance(raw, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    body = validate(CompactBody, raw)
    if body.input is None and body.previous_response_id is None:
        raise invalid_request(
            "Missing required parameter: 'input' (or 'previous_response_id').",
            param="input",
            code="missing_required_parameter",
        )
    return CompactRequest(body, _parse_input(body.input))


def calls_vouched_for(item: dict[str, Any]) -> tuple[str, ...]:
    """The call ids an item makes answerable: a call's own, or those a compaction stands for."""
    if item.get("type") == "function_call":
        return (str(item.get("call_id")),)
    if item.get("type") == "compaction":
        return vouched_calls(item)
    return ()


def check_tool_outputs(history: Sequence[dict[str, Any]], new_items: Sequence[dict[str, Any]]) -> None:
    """Refuse a new ``function_call_output`` that answers no call of the conversation.

    The call may be in the history, among the new items (SDKs replay a call with its output)
    or behind a compaction item. Only new outputs are checked: the history's were checked
    when they were new. The history is read from its end and only until every output has
    found its call, so answering the latest calls costs little however long the history.

    >>> call = {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"}
    >>> check_tool_outputs([call], [{"type": "function_call_output", "call_id": "call_1", "output": ""}])
    >>> check_tool_outputs([call], [{"type": "function_call_output", "call_id": "call_9", "output": ""}])
    Traceback (most recent call last):
    labkit.api.errors.APIError: No tool call found for function call output with call_id call_9.
    """
    wanted: dict[str, int] = {}
    for i, item in enumerate(new_items):
        if item.get("type") == "function_call_output":
            wanted.setdefault(str(item.get("call_id")), i)
    for item in itertools.chain(new_items, reversed(history)):  # lazily: most stop near the end
        if not wanted:
            return
        for call_id in calls_vouched_for(item):
            wanted.pop(call_id, None)
    if wanted:
        call_id, i = min(wanted.items(), key=lambda pair: pair[1])
        raise invalid_request(
            f"No tool call found for function call output with call_id {call_id}.",
            param=f"input[{i}].call_id",
            code="invalid_value",
        )


def check_new_items(
    history: Sequence[dict[str, Any]], new_items: Sequence[dict[str, Any]], owner: str
) -> None:
    """The checks that need the conversation and the owner: compaction seals, then tool outputs."""
    verify_compactions(new_items, owner)
    check_tool_outputs(history, new_items)


def stored_form(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as the API lists it back: string content as a text part, a status set.

    >>> stored_form({"type": "message", "role": "user", "content": "hi"})["content"]
    [{'type': 'input_text', 'text': 'hi'}]
    """
    item = dict(item)
    if item.get("type") == "message" and isinstance(item.get("content"), str):
        if item.get("role") == "assistant":
            part = {"type": "output_text", "text": item["content"], "annotations": []}
        else:
            part = {"type": "input_text", "text": item["content"]}
        item["content"] = [part]
    if item.get("type") in ("message", "function_call", "function_call_output"):
        item.setdefault("status", "completed")
    return item
