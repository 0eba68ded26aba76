"""Validation of ``response.create`` bodies with pydantic v2.

Unknown fields are ignored; a wrong type or value is an ``APIError`` (400)
naming the offending ``param`` in the API's own path syntax, e.g.
``input[2].call_id``. Input items keep fields they do not know (such as a
replayed reasoning item's ``encrypted_content``) so they round-trip intact.

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
import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from labkit.api.compaction import verify_compactions, vouched_calls
from labkit.api.errors import APIError, invalid_request

# ---------------------------------------------------------------- items


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
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    user: str | None = None
    safety_identifier: str | None = None

    @model_validator(mode="after")
    def _nulls_are_defaults(self) -> CreateBody:
        self.tools = [] if self.tools is None else self.tools
        self.tool_choice = "auto" if self.tool_choice is None else self.tool_choice
        self.parallel_tool_calls = True if self.parallel_tool_calls is None else self.parallel_tool_calls
        return self


class CreateRequest:
    """A validated create request: the body's fields plus normalized items and tools."""

    def __init__(self, body: CreateBody, items: list[dict[str, Any]], tools: list[dict[str, Any]]):
        self.body = body
        self.items = items
        self.tools = tools

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


class CompactRequest:
    """A validated compact request: the body's fields plus its normalized input items."""

    def __init__(self, body: CompactBody, items: list[dict[str, Any]]):
        self.body = body
        self.items = items

    def __getattr__(self, name: str) -> Any:
        return getattr(self.body, name)


# ---------------------------------------------------------------- errors in the API's words

_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


_UNION_MEMBERS = {"str", "int", "float", "bool", "dict", "list", "none"}


def param_path(loc: tuple[Any, ...], prefix: str = "") -> str:
    """Pydantic's error location in the API's syntax: ``("input", 2, "role") -> 'input[2].role'``."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" in part or part[:1].isupper() or part in _UNION_MEMBERS:
            continue  # pydantic's name for a union member, not a field
        else:
            path += f".{part}" if path else part
    return path


def _to_api_error(exc: ValidationError, prefix: str = "") -> APIError:
    err = max(exc.errors(), key=lambda e: len(e["loc"]))  # the most specific branch
    param = param_path(tuple(err["loc"]), prefix) or None
    kind = err["type"]
    if kind == "missing":
        return invalid_request(
            f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
        )
    if kind in _TYPE_WORDS:
        return invalid_request(
            f"Invalid type for '{param}': expected {_TYPE_WORDS[kind]}.",
            param=param,
            code="invalid_type",
        )
    return invalid_request(f"Invalid value for '{param}': {err['msg']}.", param=param, code="invalid_value")


def _validate(model: type[BaseModel], raw: Any, prefix: str = "") -> BaseModel:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _to_api_error(exc, prefix) from None


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
    item = _validate(model, {**raw, "type": kind}, param)
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
    tool = _validate(FunctionTool, raw, param)
    assert isinstance(tool, FunctionTool)
    if tool.parameters is not None:
        check_schema(tool.parameters, f"{param}.parameters", tool.name)
    return tool.model_dump(exclude_none=True)


# ---------------------------------------------------------------- tool parameter schemas

# The JSON Schema keywords labkit reads (to render a tool and to build example arguments),
# and what each must hold. Other keywords are kept and never read.
_SCHEMA_KEYS = ("properties", "$defs", "definitions", "patternProperties")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf")
_SCHEMA_ONE = ("not", "additionalProperties", "additionalItems", "contains", "propertyNames")
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
_BOUNDS = ("minimum", "maximum", "multipleOf")
_JSON_TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _schema_problem(schema: dict[str, Any]) -> tuple[str, str] | None:
    """The first keyword of one schema node (not its children) that holds the wrong kind of value."""
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not kinds or not all(isinstance(k, str) and k in _JSON_TYPES for k in kinds):
            return "type", "a JSON type name or a non-empty array of them"
    if "required" in schema and not (
        isinstance(schema["required"], list) and all(isinstance(k, str) for k in schema["required"])
    ):
        return "required", "an array of strings"
    if "enum" in schema and not isinstance(schema["enum"], list):
        return "enum", "an array"
    for key in _COUNTS:
        value = schema.get(key)
        if key in schema and not (_is_number(value) and value >= 0 and float(value).is_integer()):
            return key, "a non-negative integer"
    for key in _BOUNDS:
        if key in schema and not _is_number(schema[key]):
            return key, "a finite number"
    for key in ("exclusiveMinimum", "exclusiveMaximum"):  # a number, or draft 4's boolean
        if key in schema and not (_is_number(schema[key]) or isinstance(schema[key], bool)):
            return key, "a finite number"
    for key in _SCHEMA_KEYS:
        if key in schema and not (
            isinstance(schema[key], dict) and all(isinstance(v, dict | bool) for v in schema[key].values())
        ):
            return key, "an object of schemas"
    for key in _SCHEMA_LISTS:
        if key in schema and not (
            isinstance(schema[key], list)
            and schema[key]
            and all(isinstance(v, dict | bool) for v in schema[key])
        ):
            return key, "a non-empty array of schemas"
    for key in _SCHEMA_ONE:
        if key in schema and not isinstance(schema[key], dict | bool):
            return key, "a schema"
    items = schema.get("items")
    if "items" in schema and not (
        isinstance(items, dict | bool)
        or (isinstance(items, list) and all(isinstance(v, dict | bool) for v in items))
    ):
        return "items", "a schema or an array of schemas"
    return None


def _subschemas(schema: dict[str, Any], path: str) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for key in _SCHEMA_KEYS:
        found += [(f"{path}.{key}.{name}", sub) for name, sub in (schema.get(key) or {}).items()]
    for key in _SCHEMA_LISTS:
        found += [(f"{path}.{key}[{i}]", sub) for i, sub in enumerate(schema.get(key) or [])]
    for key in _SCHEMA_ONE:
        if key in schema:
            found.append((f"{path}.{key}", schema[key]))
    items = schema.get("items")
    if isinstance(items, list):
        found += [(f"{path}.items[{i}]", sub) for i, sub in enumerate(items)]
    elif items is not None:
        found.append((f"{path}.items", items))
    return found


def check_schema(schema: dict[str, Any], param: str, name: str) -> None:
    """Refuse a function's ``parameters`` whose keywords hold the wrong kind of value.

    Only the keywords labkit reads are checked (types, properties, required, enum, the
    combinators, counts and bounds), at every level; a 400 ``invalid_function_parameters``
    names the keyword's path.

    >>> check_schema({"type": "object", "properties": {"tags": {"type": "array", "minItems": -1}}},
    ...     "tools[0].parameters", "tag")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    labkit.api.errors.APIError: Invalid schema ... 'tools[0].parameters.properties.tags.minItems' must be ...
    """
    stack: list[tuple[str, Any]] = [(param, schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, bool):
            continue  # true and false are schemas too
        if not isinstance(node, dict):
            problem: tuple[str, str] | None = ("", "a schema (an object or a boolean)")
        else:
            problem = _schema_problem(node)
        if problem is not None:
            key, wanted = problem
            where = f"{path}.{key}" if key else path
            raise invalid_request(
                f"Invalid schema for function '{name}': '{where}' must be {wanted}.",
                param=where,
                code="invalid_function_parameters",
            )
        stack.extend(reversed(_subschemas(node, path)))


def _parse_input(raw: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return [parse_item(raw_item, f"input[{i}]") for i, raw_item in enumerate(raw or [])]


def parse_create(raw: Any) -> CreateRequest:
    """Validate a whole create body; raises ``APIError`` on the first problem."""
    if not isinstance(raw, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    body = _validate(CreateBody, raw)
    assert isinstance(body, CreateBody)
    items = _parse_input(body.input)
    tools = [parse_tool(raw_tool, f"tools[{i}]") for i, raw_tool in enumerate(body.tools or [])]
    if body.metadata is not None:
        check_metadata(body.metadata)
    return CreateRequest(body, items, tools)


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


def parse_compact(raw: Any) -> CompactRequest:
    """Validate a compact body: a model, and a window (``input``, ``previous_response_id`` or both).

    >>> parse_compact({"input": "hi"})
    Traceback (most recent call last):
    labkit.api.errors.APIError: Missing required parameter: 'model'.
    """
    if not isinstance(raw, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    body = _validate(CompactBody, raw)
    assert isinstance(body, CompactBody)
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
