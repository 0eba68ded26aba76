"""Wire shapes without a socket: request parsing, the streaming event sequence, errors, SSE framing.

The contract is docs/protocol.md (§1 requests and items, §2 events, §5 errors);
where the official SDK's own types can check a shape, they do.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from labkit.api.errors import (
    APIError,
    authentication_error,
    invalid_request,
    previous_response_not_found,
    response_not_found,
)
from labkit.api.events import ResponseEvents
from labkit.api.requests import parse_create
from labkit.api.responses import new_response, usage
from labkit.api.sse import encode_event, frame

SDK_EVENT = TypeAdapter(ResponseStreamEvent)

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


# ---------------------------------------------------------------- the event sequence


def fresh_response(**body: Any) -> dict[str, Any]:
    return new_response(
        "resp_1", parse_create({"model": "labkit-spark", "input": "hi", **body}), "labkit-spark"
    )


def text_turn() -> tuple[list[dict], ResponseEvents]:
    ev = ResponseEvents(fresh_response())
    events = [*ev.start(), *ev.begin_message("msg_1")]
    events += [ev.delta(chunk) for chunk in ("Hel", "lo, ", "world\n✓")]
    events += ev.end_item()
    events.append(ev.finish("completed", usage(12, 0, 3)))
    return events, ev


def call_turn() -> tuple[list[dict], ResponseEvents]:
    ev = ResponseEvents(fresh_response(tools=[{"type": "function", "name": "ls"}]))
    events = [*ev.start(), *ev.begin_call("fc_1", "call_1", "ls")]
    events += [ev.delta(chunk) for chunk in ('{"pa', 'th": "."}')]
    events += ev.end_item()
    events.append(ev.finish("completed", usage(20, 16, 5)))
    return events, ev


def test_a_text_turn_follows_the_documented_order() -> None:
    events, _ = text_turn()
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_a_text_turns_events_carry_the_right_fields() -> None:
    events, _ = text_turn()
    created, in_progress, added, part_added, *deltas, text_done, part_done, item_done, completed = events
    for e in (created, in_progress):
        assert e["response"]["status"] == "in_progress"
        assert e["response"]["output"] == []
    assert added["output_index"] == 0
    assert added["item"] == {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    assert part_added["part"]["type"] == "output_text"
    assert part_added["part"]["text"] == ""
    for e in (part_added, *deltas, text_done, part_done):
        assert (e["item_id"], e["output_index"], e["content_index"]) == ("msg_1", 0, 0)
    for e in deltas:
        assert e["logprobs"] == []
    text = "".join(e["delta"] for e in deltas)
    assert text == "Hello, world\n✓"
    assert text_done["text"] == text
    assert part_done["part"] == {"type": "output_text", "text": text, "annotations": []}
    assert item_done["output_index"] == 0
    assert item_done["item"]["status"] == "completed"
    assert item_done["item"]["content"] == [part_done["part"]]
    response = completed["response"]
    assert response["status"] == "completed"
    assert response["output"] == [item_done["item"]]
    assert response["usage"] == usage(12, 0, 3)
    assert response["completed_at"] is not None


def test_a_function_call_turn_follows_the_documented_order() -> None:
    events, _ = call_turn()
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    _, _, added, *deltas, args_done, item_done, completed = events
    assert added["item"] == {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "ls",
        "arguments": "",
        "status": "in_progress",
    }
    for e in (*deltas, args_done):
        assert (e["item_id"], e["output_index"]) == ("fc_1", 0)
    assert (args_done["name"], args_done["arguments"]) == ("ls", '{"path": "."}')
    assert item_done["item"] == {**added["item"], "arguments": '{"path": "."}', "status": "completed"}
    assert completed["response"]["output"] == [item_done["item"]]
    assert completed["response"]["usage"]["input_tokens_details"]["cached_tokens"] == 16


def test_output_indices_count_the_items_before() -> None:
    ev = ResponseEvents(fresh_response())
    events = [*ev.start(), *ev.begin_message("msg_1"), ev.delta("Let me look."), *ev.end_item()]
    events += [*ev.begin_call("fc_1", "call_1", "ls"), ev.delta("{}"), *ev.end_item()]
    events.append(ev.finish("completed", usage(1, 0, 2)))
    indices = [e["output_index"] for e in events if "output_index" in e]
    assert indices == [0] * 6 + [1] * 4
    assert [item["type"] for item in events[-1]["response"]["output"]] == ["message", "function_call"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_earlier_snapshots_are_not_changed_by_later_events() -> None:
    events, ev = text_turn()
    assert events[0]["response"]["output"] == []
    assert events[0]["response"]["status"] == "in_progress"
    assert events[2]["item"]["content"] == []
    ev.response["output"].clear()
    assert events[-1]["response"]["output"] != []


def test_an_incomplete_response_ends_with_its_reason() -> None:
    ev = ResponseEvents(fresh_response(max_output_tokens=16))
    events = [*ev.start(), *ev.begin_message("msg_1"), ev.delta("cut"), *ev.end_item("incomplete")]
    events.append(ev.finish("incomplete", usage(5, 0, 16), incomplete_reason="max_output_tokens"))
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize("turn", [text_turn, call_turn])
def test_the_official_sdk_parses_every_event(turn: Any) -> None:
    events, _ = turn()
    for event in events[:-1]:
        parsed = SDK_EVENT.validate_python(event)
        assert parsed.type == event["type"]
        assert parsed.sequence_number == event["sequence_number"]


@pytest.mark.parametrize("turn", [text_turn, call_turn])
def test_the_official_sdk_parses_the_terminal_event(turn: Any) -> None:
    events, _ = turn()
    parsed = SDK_EVENT.validate_python(events[-1])
    assert parsed.response.usage.input_tokens == events[-1]["response"]["usage"]["input_tokens"]


# ---------------------------------------------------------------- errors

ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    "err",
    [
        invalid_request("Bad thing.", param="input[0].role", code="invalid_value"),
        invalid_request("Bad body."),  # param and code null, but present
        previous_response_not_found("resp_x"),
        response_not_found("resp_x"),
        authentication_error(),
    ],
)
def test_error_shapes(err: APIError) -> None:
    body = err.body()
    assert set(body) == {"error"}
    assert set(body["error"]) == ERROR_KEYS
    assert body["error"] == {"message": err.message, "type": err.type, "param": err.param, "code": err.code}

    ws = err.ws_event()
    nested = {**body["error"], "code": err.code or err.type}  # WebSocket codes are always strings
    assert ws == {"type": "error", "status": err.status, "error": nested}

    sse = err.sse_event(7)
    assert sse == {
        "type": "error",
        "code": err.code,
        "message": err.message,
        "param": err.param,
        "error": body["error"],
        "sequence_number": 7,
    }
    assert SDK_EVENT.validate_python(sse).type == "error"
    json.dumps([body, ws, sse])


def test_previous_response_not_found_is_as_documented() -> None:
    err = previous_response_not_found("resp_x")
    assert err.status == 400
    assert err.body() == {
        "error": {
            "message": "Previous response with id 'resp_x' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }


def test_error_statuses_and_types_pair_as_documented() -> None:
    assert (authentication_error().status, authentication_error().type) == (401, "authentication_error")
    assert (response_not_found("r").status, response_not_found("r").type) == (404, "not_found_error")
    assert (invalid_request("x").status, invalid_request("x").type) == (400, "invalid_request_error")


# ---------------------------------------------------------------- SSE framing


def test_the_documented_frame() -> None:
    event = {"type": "response.created", "sequence_number": 0}
    assert (
        frame(event) == b'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n'
    )


def test_a_frame_is_one_event_line_and_one_data_line() -> None:
    event = {"type": "response.output_text.delta", "delta": "line one\nline two ✓\r\n", "sequence_number": 4}
    raw = frame(event)
    assert raw.endswith(b"\n\n")
    lines = raw.decode("utf-8").split("\n")
    assert lines[0] == "event: response.output_text.delta"
    assert lines[1].startswith("data: ")
    assert lines[2:] == ["", ""]
    assert json.loads(lines[1].removeprefix("data: ")) == event
    assert "✓" in lines[1]  # UTF-8, not \\u escapes
    assert encode_event(event) == lines[1].removeprefix("data: ")


def test_every_event_of_a_turn_frames_and_parses_back() -> None:
    events, _ = text_turn()
    stream = b"".join(frame(e) for e in events).decode("utf-8")
    blocks = [b for b in stream.split("\n\n") if b]
    assert len(blocks) == len(events)
    for block, event in zip(blocks, events, strict=True):
        kind, data = block.split("\n")
        assert kind == f"event: {event['type']}"
        assert json.loads(data.removeprefix("data: ")) == event
