"""JSON Schemas for what a server sends, transcribed from the Open Responses specification.

Version followed: the OpenAPI 3.1 document ``Open Responses``, ``info.version`` 2026-04-24
(github.com/openresponses/openresponses, ``public/openapi/openapi.json``), the version that
added WebSocket mode on ``/responses`` and ``POST /responses/compact``. Each schema below
keeps the spec's component name, its ``required`` lists, property types, enums and
nullability (``anyOf [X, null]``); descriptions and OpenAPI-only keywords (``discriminator``,
``x-*``) are left out. No labkit code is imported: these schemas are the yardstick.

One shape is labkit's reading rather than the document's: the specification gives no
schema for an HTTP error body, so ``ErrorBody`` requires ``{"error": ErrorPayload}``, the
payload the specification's streaming ``error`` event carries.

    >>> validate("Usage", {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4,
    ...     "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}})
    >>> problems("IncompleteDetails", {})
    ["$: 'reason' is a required property"]
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

SPEC_VERSION = "2026-04-24"

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/$defs/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def const_type(value: str) -> Schema:
    return {"type": "string", "enum": [value]}


def obj(required: list[str], properties: dict[str, Schema]) -> Schema:
    """An object schema; like the specification's, it allows properties it does not list."""
    return {"type": "object", "required": required, "properties": properties}


STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
ITEM_STATUS: Schema = {"type": "string", "enum": ["in_progress", "completed", "incomplete"]}

CONTENT_PARTS = [
    "InputTextContent",
    "OutputTextContent",
    "TextContent",
    "SummaryTextContent",
    "ReasoningTextContent",
    "RefusalContent",
    "InputImageContent",
    "InputFileContent",
]
CONTENT_PART: Schema = {"oneOf": [ref(name) for name in CONTENT_PARTS]}

DEFS: dict[str, Schema] = {
    # ------------------------------------------------------------ content parts
    "InputTextContent": obj(["type", "text"], {"type": const_type("input_text"), "text": STRING}),
    "UrlCitationBody": obj(
        ["type", "url", "start_index", "end_index", "title"],
        {
            "type": const_type("url_citation"),
            "url": STRING,
            "start_index": INTEGER,
            "end_index": INTEGER,
            "title": STRING,
        },
    ),
    "Annotation": ref("UrlCitationBody"),
    "TopLogProb": obj(
        ["token", "logprob", "bytes"],
        {"token": STRING, "logprob": NUMBER, "bytes": {"type": "array", "items": INTEGER}},
    ),
    "LogProb": obj(
        ["token", "logprob", "bytes", "top_logprobs"],
        {
            "token": STRING,
            "logprob": NUMBER,
            "bytes": {"type": "array", "items": INTEGER},
            "top_logprobs": {"type": "array", "items": ref("TopLogProb")},
        },
    ),
    "OutputTextContent": obj(
        ["type", "text", "annotations"],
        {
            "type": const_type("output_text"),
            "text": STRING,
            "annotations": {"type": "array", "items": ref("Annotation")},
            "logprobs": {"type": "array", "items": ref("LogProb")},
        },
    ),
    "TextContent": obj(["type", "text"], {"type": const_type("text"), "text": STRING}),
    "SummaryTextContent": obj(["type", "text"], {"type": const_type("summary_text"), "text": STRING}),
    "ReasoningTextContent": obj(["type", "text"], {"type": const_type("reasoning_text"), "text": STRING}),
    "RefusalContent": obj(["type", "refusal"], {"type": const_type("refusal"), "refusal": STRING}),
    "InputImageContent": obj(
        ["type", "image_url", "detail"],
        {
            "type": const_type("input_image"),
            "image_url": nullable(STRING),
            "detail": {"type": "string", "enum": ["low", "high", "auto"]},
        },
    ),
    "InputFileContent": obj(
        ["type"], {"type": const_type("input_file"), "filename": STRING, "file_url": STRING}
    ),
    # ------------------------------------------------------------ items
    "Message": obj(
        ["type", "id", "status", "role", "content"],
        {
            "type": const_type("message"),
            "id": STRING,
            "status": ITEM_STATUS,
            "role": {"type": "string", "enum": ["user", "assistant", "system", "developer"]},
            "content": {"type": "array", "items": CONTENT_PART},
            "phase": {"type": "string", "enum": ["commentary", "final_answer"]},
        },
    ),
    "FunctionCall": obj(
        ["type", "id", "call_id", "name", "arguments", "status"],
        {
            "type": const_type("function_call"),
            "id": STRING,
            "call_id": STRING,
            "name": STRING,
            "arguments": STRING,
            "status": ITEM_STATUS,
        },
    ),
    "FunctionCallOutput": obj(
        ["type", "id", "call_id", "output", "status"],
        {
            "type": const_type("function_call_output"),
            "id": STRING,
            "call_id": STRING,
            "output": {
                "oneOf": [
                    STRING,
                    {
                        "type": "array",
                        "items": {
                            "oneOf": [
                                ref("InputTextContent"),
                                ref("InputImageContent"),
                                ref("InputFileContent"),
                            ]
                        },
                    },
                ]
            },
            "status": ITEM_STATUS,
        },
    ),
    "ReasoningBody": obj(
        ["type", "id", "summary"],
        {
            "type": const_type("reasoning"),
            "id": STRING,
            "content": {"type": "array", "items": CONTENT_PART},
            "summary": {"type": "array", "items": CONTENT_PART},
            "encrypted_content": STRING,
        },
    ),
    "CompactionBody": obj(
        ["type", "id", "encrypted_content"],
        {"type": const_type("compaction"), "id": STRING, "encrypted_content": STRING, "created_by": STRING},
    ),
    "ItemField": {
        "oneOf": [
            ref("Message"),
            ref("FunctionCall"),
            ref("FunctionCallOutput"),
            ref("ReasoningBody"),
            ref("CompactionBody"),
        ]
    },
    # ------------------------------------------------------------ the response's settings
    "Error": obj(["code", "message"], {"code": STRING, "message": STRING}),
    "FunctionTool": obj(
        ["type", "name", "description", "parameters", "strict"],
        {
            "type": const_type("function"),
            "name": STRING,
            "description": nullable(STRING),
            "parameters": nullable({"type": "object"}),
            "strict": nullable(BOOLEAN),
        },
    ),
    "Tool": ref("FunctionTool"),
    "FunctionToolChoice": obj(["type"], {"type": const_type("function"), "name": STRING}),
    "ToolChoiceValueEnum": {"type": "string", "enum": ["none", "auto", "required"]},
    "AllowedToolChoice": obj(
        ["type", "tools", "mode"],
        {
            "type": const_type("allowed_tools"),
            "tools": {"type": "array", "items": ref("FunctionToolChoice")},
            "mode": ref("ToolChoiceValueEnum"),
        },
    ),
    "TruncationEnum": {"type": "string", "enum": ["auto", "disabled"]},
    "TextResponseFormat": obj(["type"], {"type": const_type("text")}),
    "JsonObjectResponseFormat": obj(["type"], {"type": const_type("json_object")}),
    "JsonSchemaResponseFormat": obj(
        ["type", "name", "description", "schema", "strict"],
        {
            "type": const_type("json_schema"),
            "name": STRING,
            "description": nullable(STRING),
            "schema": {"type": "null"},  # as the document has it
            "strict": BOOLEAN,
        },
    ),
    "TextField": obj(
        ["format"],
        {
            "format": {
                "oneOf": [
                    ref("TextResponseFormat"),
                    ref("JsonObjectResponseFormat"),
                    ref("JsonSchemaResponseFormat"),
                ]
            },
            "verbosity": {"type": "string", "enum": ["low", "medium", "high"]},
        },
    ),
    "Reasoning": obj(
        ["effort", "summary"],
        {
            "effort": nullable({"type": "string", "enum": ["none", "low", "medium", "high", "xhigh"]}),
            "summary": nullable({"type": "string", "enum": ["concise", "detailed", "auto"]}),
        },
    ),
    "Usage": obj(
        ["input_tokens", "output_tokens", "total_tokens", "input_tokens_details", "output_tokens_details"],
        {
            "input_tokens": INTEGER,
            "output_tokens": INTEGER,
            "total_tokens": INTEGER,
            "input_tokens_details": obj(["cached_tokens"], {"cached_tokens": INTEGER}),
            "output_tokens_details": obj(["reasoning_tokens"], {"reasoning_tokens": INTEGER}),
        },
    ),
    "IncompleteDetails": obj(["reason"], {"reason": STRING}),
    # ------------------------------------------------------------ the response
    "ResponseResource": obj(
        [
            "id",
            "object",
            "created_at",
            "completed_at",
            "status",
            "incomplete_details",
            "model",
            "previous_response_id",
            "instructions",
            "output",
            "error",
            "tools",
            "tool_choice",
            "truncation",
            "parallel_tool_calls",
            "text",
            "top_p",
            "presence_penalty",
            "frequency_penalty",
            "top_logprobs",
            "temperature",
            "reasoning",
            "usage",
            "max_output_tokens",
            "max_tool_calls",
            "store",
            "background",
            "service_tier",
            "metadata",
            "safety_identifier",
            "prompt_cache_key",
        ],
        {
            "id": STRING,
            "object": const_type("response"),
            "created_at": INTEGER,
            "completed_at": nullable(INTEGER),
            "status": STRING,
            "incomplete_details": nullable(ref("IncompleteDetails")),
            "model": STRING,
            "previous_response_id": nullable(STRING),
            "instructions": nullable(STRING),
            "output": {"type": "array", "items": ref("ItemField")},
            "error": nullable(ref("Error")),
            "tools": {"type": "array", "items": ref("Tool")},
            "tool_choice": {
                "oneOf": [ref("FunctionToolChoice"), ref("ToolChoiceValueEnum"), ref("AllowedToolChoice")]
            },
            "truncation": ref("TruncationEnum"),
            "parallel_tool_calls": BOOLEAN,
            "text": ref("TextField"),
            "top_p": NUMBER,
            "presence_penalty": NUMBER,
            "frequency_penalty": NUMBER,
            "top_logprobs": INTEGER,
            "temperature": NUMBER,
            "reasoning": nullable(ref("Reasoning")),
            "usage": nullable(ref("Usage")),
            "max_output_tokens": nullable(INTEGER),
            "max_tool_calls": nullable(INTEGER),
            "store": BOOLEAN,
            "background": BOOLEAN,
            "service_tier": STRING,
            "metadata": {},
            "safety_identifier": nullable(STRING),
            "prompt_cache_key": nullable(STRING),
        },
    ),
    # ------------------------------------------------------------ errors
    "ErrorPayload": obj(
        ["type", "code", "message", "param"],
        {
            "type": STRING,
            "code": nullable(STRING),
            "message": STRING,
            "param": nullable(STRING),
            "headers": {"type": "object", "additionalProperties": STRING},
        },
    ),
    "ErrorStreamingEvent": obj(
        ["type", "sequence_number", "error"],
        {"type": const_type("error"), "sequence_number": INTEGER, "error": ref("ErrorPayload")},
    ),
    "WebSocketErrorEvent": obj(
        ["type", "status", "error"],
        {
            "type": const_type("error"),
            "status": INTEGER,
            "error": obj(
                ["code", "message"],
                {"type": STRING, "code": STRING, "message": STRING, "param": nullable(STRING)},
            ),
        },
    ),
    "ErrorBody": obj(["error"], {"error": ref("ErrorPayload")}),  # labkit's reading, see above
    # ------------------------------------------------------------ compaction
    "CompactResource": obj(
        ["id", "object", "output", "created_at", "usage"],
        {
            "id": STRING,
            "object": const_type("response.compaction"),
            "output": {"type": "array", "items": ref("ItemField")},
            "created_at": INTEGER,
            "usage": ref("Usage"),
        },
    ),
}


def _event(kind: str, fields: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """A streaming event: ``type``, ``sequence_number`` and ``fields`` required, ``optional`` not."""
    properties = {"type": const_type(kind), "sequence_number": INTEGER, **fields, **(optional or {})}
    return obj(["type", "sequence_number", *fields], properties)


TEXT_PLACE = {"item_id": STRING, "output_index": INTEGER, "content_index": INTEGER}
CALL_PLACE = {"item_id": STRING, "output_index": INTEGER}
LOGPROBS: Schema = {"type": "array", "items": ref("LogProb")}

# The streaming events, by their ``type`` (the same schemas serve SSE and WebSocket mode).
EVENT_SCHEMAS = {
    "response.created": "ResponseCreatedStreamingEvent",
    "response.queued": "ResponseQueuedStreamingEvent",
    "response.in_progress": "ResponseInProgressStreamingEvent",
    "response.completed": "ResponseCompletedStreamingEvent",
    "response.failed": "ResponseFailedStreamingEvent",
    "response.incomplete": "ResponseIncompleteStreamingEvent",
    "response.output_item.added": "ResponseOutputItemAddedStreamingEvent",
    "response.output_item.done": "ResponseOutputItemDoneStreamingEvent",
    "response.content_part.added": "ResponseContentPartAddedStreamingEvent",
    "response.content_part.done": "ResponseContentPartDoneStreamingEvent",
    "response.output_text.delta": "ResponseOutputTextDeltaStreamingEvent",
    "response.output_text.done": "ResponseOutputTextDoneStreamingEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaStreamingEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneStreamingEvent",
}
EVENT_FIELDS: dict[str, tuple[dict[str, Schema], dict[str, Schema]]] = {
    **{
        f"response.{state}": ({"response": ref("ResponseResource")}, {})
        for state in ("created", "queued", "in_progress", "completed", "failed", "incomplete")
    },
    **{
        f"response.output_item.{end}": ({"output_index": INTEGER, "item": nullable(ref("ItemField"))}, {})
        for end in ("added", "done")
    },
    **{
        f"response.content_part.{end}": ({**TEXT_PLACE, "part": CONTENT_PART}, {})
        for end in ("added", "done")
    },
    "response.output_text.delta": (
        {**TEXT_PLACE, "delta": STRING},
        {"logprobs": LOGPROBS, "obfuscation": STRING},
    ),
    "response.output_text.done": ({**TEXT_PLACE, "text": STRING}, {"logprobs": LOGPROBS}),
    "response.function_call_arguments.delta": ({**CALL_PLACE, "delta": STRING}, {"obfuscation": STRING}),
    "response.function_call_arguments.done": ({**CALL_PLACE, "arguments": STRING}, {}),
}
for _kind, (_fields, _optional) in EVENT_FIELDS.items():
    DEFS[EVENT_SCHEMAS[_kind]] = _event(_kind, _fields, _optional)


@cache
def validator(name: str) -> Draft202012Validator:
    if name not in DEFS:
        raise KeyError(f"no schema named {name!r}")
    schema = {"$defs": DEFS, **ref(name)}
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def problems(name: str, instance: Any) -> list[str]:
    """Every way ``instance`` fails schema ``name``, as ``path: message`` lines ([] if it validates)."""
    found = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"{e.json_path}: {e.message}" for e in found]


def validate(name: str, instance: Any) -> None:
    """Raise ``AssertionError`` naming every problem if ``instance`` does not validate."""
    found = problems(name, instance)
    assert not found, f"not a valid {name}:\n" + "\n".join(found)


def event_schema(event: dict[str, Any], *, websocket: bool = False) -> str:
    """The schema an event must meet: by its ``type``; ``error`` differs by transport."""
    kind = event.get("type")
    if kind == "error":
        return "WebSocketErrorEvent" if websocket else "ErrorStreamingEvent"
    if kind not in EVENT_SCHEMAS:
        raise AssertionError(f"not an event of the specification: {kind!r}")
    return EVENT_SCHEMAS[kind]


def validate_event(event: dict[str, Any], *, websocket: bool = False) -> None:
    validate(event_schema(event, websocket=websocket), event)
