"""``parse_create``: the request bodies it accepts and how it reads them, and the ones it rejects
(with the offending param named, as the protocol documents).
"""

from __future__ import annotations

from typing import Any

import pytest

from labkit.api.errors import (
    APIError,
)
from labkit.api.requests import parse_create

# ---------------------------------------------------------------- parse_create: what it accepts


def test_string_input_is_one_user_message() -> None:
    req = parse_create({"model": "labkit-spark", "input": "hi"})
    assert req.items == [{"type": "message", "role": "user", "content": "hi"}]
    assert req.model == "labkit-spark"


def test_defaults_follow_the_protocol() -> None:
    req = parse_create({"model": "m"})
    assert req.items == []
    assert req.tools == []
    assert req.store is True
    assert req.stream is False
    assert req.parallel_tool_calls is True
    assert req.tool_choice_wire == "auto"
    assert req.previous_response_id is None


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        (  # a message without "type"
            {"role": "user", "content": "hi"},
            {"type": "message", "role": "user", "content": "hi"},
        ),
        (
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be terse"}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be terse"}]},
        ),
        ({"role": "system", "content": "sys"}, {"type": "message", "role": "system", "content": "sys"}),
        (  # an assistant history message, with output_text parts
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "yo", "annotations": []}],
            },
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "yo", "annotations": []}],
            },
        ),
        (
            {
                "type": "function_call",
                "id": "fc_1",
                "status": "completed",
                "call_id": "call_1",
                "name": "ls",
                "arguments": "{}",
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "status": "completed",
                "call_id": "call_1",
                "name": "ls",
                "arguments": "{}",
            },
        ),
        (  # Codex replays calls without id and status
            {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": '{"path": "."}'},
            {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": '{"path": "."}'},
        ),
        (
            {"type": "function_call_output", "call_id": "call_1", "output": "a\nb"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a\nb"},
        ),
        (
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [{"type": "input_text", "text": "x"}],
            },
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [{"type": "input_text", "text": "x"}],
            },
        ),
        (  # a replayed reasoning item keeps its encrypted content
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "thought"}],
                "encrypted_content": "gAAAAB...",
            },
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "thought"}],
                "encrypted_content": "gAAAAB...",
            },
        ),
        ({"type": "reasoning", "summary": []}, {"type": "reasoning", "summary": []}),
        ({"type": "item_reference", "id": "msg_9"}, {"type": "item_reference", "id": "msg_9"}),
        ({"id": "msg_9"}, {"type": "item_reference", "id": "msg_9"}),  # a reference without "type"
        (  # a client's own item type is kept as it came
            {
                "type": "local_shell_call",
                "call_id": "s1",
                "action": {"command": ["ls"]},
                "status": "completed",
            },
            {
                "type": "local_shell_call",
                "call_id": "s1",
                "action": {"command": ["ls"]},
                "status": "completed",
            },
        ),
    ],
)
def test_every_input_item_type_is_accepted(raw: dict, parsed: dict) -> None:
    req = parse_create({"model": "m", "input": [raw]})
    assert req.items == [parsed]


def test_items_keep_fields_labkit_does_not_know() -> None:
    item = {"role": "user", "content": "hi", "x_client_tag": {"a": 1}}
    part = {"type": "output_text", "text": "yo", "annotations": [], "x_part": True}
    req = parse_create({"model": "m", "input": [item, {"role": "assistant", "content": [part]}]})
    assert req.items[0]["x_client_tag"] == {"a": 1}
    assert req.items[1]["content"] == [part]


def test_unknown_body_fields_are_ignored() -> None:
    req = parse_create(
        {
            "model": "m",
            "input": "hi",
            "client_metadata": {"session": "s"},
            "service_tier": "auto",
            "stream_options": {"include_obfuscation": False},
            "x_future_field": [1, 2, 3],
        }
    )
    assert req.items == [{"type": "message", "role": "user", "content": "hi"}]
    assert not hasattr(req.body, "x_future_field")


def test_every_documented_body_field_is_read() -> None:
    body = {
        "model": "m",
        "input": "hi",
        "instructions": "Be brief.",
        "tools": [],
        "tool_choice": "required",
        "previous_response_id": "resp_1",
        "store": False,
        "stream": True,
        "max_output_tokens": 16,
        "temperature": 0.2,
        "top_p": 0.9,
        "metadata": {"k": "v"},
        "parallel_tool_calls": False,
        "truncation": "auto",
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "json_object"}},
        "prompt_cache_key": "pck",
        "user": "u",
        "safety_identifier": "sid",
    }
    req = parse_create(body)
    for key, value in body.items():
        if key not in ("input", "tool_choice"):
            assert getattr(req, key) == value, key
    assert req.tool_choice_wire == "required"


def test_non_function_tools_pass_through_untouched() -> None:
    namespace = {"type": "namespace", "name": "mcp", "tools": [{"type": "function", "name": "x"}], "n": 1}
    web = {"type": "web_search", "search_context_size": "low"}
    custom = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}
    req = parse_create({"model": "m", "tools": [namespace, web, custom]})
    assert req.tools == [namespace, web, custom]


def test_function_tools_are_validated_and_kept() -> None:
    tool = {
        "type": "function",
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        "strict": True,
    }
    assert parse_create({"model": "m", "tools": [tool]}).tools == [tool]
    bare = {"type": "function", "name": "now", "description": None, "parameters": None, "strict": None}
    assert parse_create({"model": "m", "tools": [bare]}).tools == [{"type": "function", "name": "now"}]


def test_a_named_tool_choice_goes_back_on_the_wire() -> None:
    req = parse_create({"model": "m", "tool_choice": {"type": "function", "name": "ls"}})
    assert req.tool_choice_wire == {"type": "function", "name": "ls"}


# ---------------------------------------------------------------- parse_create: what it rejects

FC = {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"}
USER = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"input": [USER, {**FC, "call_id": 1}]}, "input[1].call_id", "invalid_type"),
        (
            {"input": [USER, {k: v for k, v in FC.items() if k != "call_id"}]},
            "input[1].call_id",
            "missing_required_parameter",
        ),
        ({"input": [{**FC, "arguments": {"path": "."}}]}, "input[0].arguments", "invalid_type"),
        ({"tools": [{"type": "function", "name": 5}]}, "tools[0].name", "invalid_type"),
        ({"tools": [{"type": "function"}]}, "tools[0].name", "missing_required_parameter"),
        ({"tools": [{"type": "function", "name": ""}]}, "tools[0].name", "invalid_value"),
        (
            {"tools": [{"type": "function", "name": "ok"}, {"type": "function", "name": "x" * 129}]},
            "tools[1].name",
            "invalid_value",
        ),
        (
            {"tools": [{"type": "function", "name": "f", "parameters": "{}"}]},
            "tools[0].parameters",
            "invalid_type",
        ),
        ({"tools": ["read_file"]}, "tools[0]", "invalid_type"),
        ({"tools": [{"name": "read_file"}]}, "tools[0]", "invalid_value"),
        ({"tools": {"type": "function"}}, "tools", "invalid_type"),
        ({"temperature": "hot"}, "temperature", "invalid_type"),
        ({"temperature": 3}, "temperature", "invalid_value"),
        ({"top_p": -0.1}, "top_p", "invalid_value"),
        ({"max_output_tokens": 8}, "max_output_tokens", "invalid_value"),
        ({"max_output_tokens": 100.5}, "max_output_tokens", "invalid_type"),
        ({"tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
        ({"metadata": {"k": 1}}, "metadata.k", "invalid_type"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata", "invalid_value"),
        ({"input": 5}, "input", "invalid_type"),
        ({"input": ["hi"]}, "input[0]", "invalid_type"),
        ({"input": [USER, {"content": "no role"}]}, "input[1].type", "missing_required_parameter"),
        ({"input": [{"type": 5}]}, "input[0].type", "invalid_type"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", "invalid_value"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content", "invalid_type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
            "input[0].content[0].text",
            "invalid_type",
        ),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]},
            "input[0].output",
            "invalid_type",
        ),
        ({"input": [{"type": "reasoning", "summary": "thought"}]}, "input[0].summary", "invalid_type"),
        ({"input": [{"type": "item_reference"}]}, "input[0].id", "missing_required_parameter"),
        ({"model": 5}, "model", "invalid_type"),
    ],
)
def test_wrong_types_name_the_offending_param(body: dict, param: str, code: str) -> None:
    with pytest.raises(APIError) as info:
        parse_create({"model": "m", **body})
    err = info.value
    assert (err.status, err.type, err.param, err.code) == (400, "invalid_request_error", param, code)
    assert f"'{param}'" in err.message


def test_a_missing_model_is_named() -> None:
    with pytest.raises(APIError) as info:
        parse_create({"input": "hi"})
    assert (info.value.param, info.value.code) == ("model", "missing_required_parameter")
    assert info.value.message == "Missing required parameter: 'model'."


def test_the_documented_type_message() -> None:
    with pytest.raises(APIError) as info:
        parse_create({"model": "m", "temperature": "hot"})
    assert info.value.message == "Invalid type for 'temperature': expected a number."


@pytest.mark.parametrize("body", [[], "hi", None, 5])
def test_a_body_that_is_not_an_object_is_rejected(body: Any) -> None:
    with pytest.raises(APIError) as info:
        parse_create(body)
    assert info.value.status == 400
    assert info.value.param is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", "yes"),
        ("store", "false"),
        ("temperature", "0.5"),
        ("max_output_tokens", "100"),
        ("top_p", True),
    ],
)
def test_strings_are_not_coerced_into_other_types(field: str, value: Any) -> None:
    with pytest.raises(APIError) as info:
        parse_create({"model": "m", field: value})
    assert (info.value.param, info.value.code) == (field, "invalid_type")
