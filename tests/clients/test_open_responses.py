"""labkit's answers, checked against the Open Responses specification's schemas.

Each flow is driven by the official ``openai`` SDK against a real ``labkit serve`` on
loopback, and what the server sent is read raw: JSON bodies (``with_raw_response``), SSE
frames (``with_streaming_response``) and WebSocket frames (``recv_bytes``). Every body,
event and frame is validated with the schemas of ``open_responses_schema.py``, which are
transcribed from the specification and import nothing from labkit.

Also here: the settings a Response must echo, and the refusal of a tool output that
answers no call (over HTTP and WebSocket mode, with the eviction of the cached response).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from labkit.api.errors import invalid_request, previous_response_not_found
from labkit.client.launcher import LabkitServer
from tests.clients.open_responses_schema import DEFS, problems, validate, validate_event, validator
from tests.helpers import READ_FILE_TOOL, auth_headers

MODEL = "labkit-spark"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
# A function tool with only the required fields: the echo must add the nullable ones.
NOW_TOOL = {"type": "function", "name": "now"}
LONG = "Write a long essay about caching."  # the simulated model runs on until max_output_tokens


# ---------------------------------------------------------------- collecting raw wire data


def http_json(client: OpenAI, **body: Any) -> dict[str, Any]:
    """A create over HTTP: the raw JSON body, checked against ResponseResource."""
    raw = client.responses.with_raw_response.create(model=MODEL, **body)
    data = raw.http_response.json()
    validate("ResponseResource", data)
    assert raw.parse().id == data["id"]  # and the SDK reads it
    return data


def sse_events(client: OpenAI, **body: Any) -> list[dict[str, Any]]:
    """A create with ``stream: true``: every SSE frame, each checked against its event schema."""
    with client.responses.with_streaming_response.create(model=MODEL, stream=True, **body) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        text = "".join(raw.iter_text())
    events = []
    for block in filter(None, text.split("\n\n")):
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        validate_event(event)
        events.append(event)
    return events


def ws_answer(conn: Any, **body: Any) -> list[dict[str, Any]]:
    """One create in WebSocket mode: its raw frames up to a terminal or error event, each checked."""
    conn.response.create(model=MODEL, **body)
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] not in TERMINAL | {"error"}:
        raw = conn.recv_bytes()
        frame = json.loads(raw)
        validate_event(frame, websocket=True)
        frames.append(frame)
    return frames


@pytest.fixture
def ws(client: OpenAI) -> Iterator[Any]:
    with client.responses.connect() as conn:
        yield conn


def error_body(exc: openai.APIStatusError, status: int) -> dict[str, Any]:
    assert exc.status_code == status
    body = exc.response.json()
    validate("ErrorBody", body)
    return body["error"]


# ---------------------------------------------------------------- the schemas themselves


def test_every_transcribed_schema_is_a_valid_json_schema() -> None:
    for name in DEFS:
        validator(name)


def test_the_schemas_catch_what_the_issue_reported() -> None:
    """Without these fields a Response fails, so the checks below have teeth."""
    response = {"id": "resp_1", "object": "response", "output": [], "tools": [NOW_TOOL]}
    found = "\n".join(problems("ResponseResource", response))
    for field in ("presence_penalty", "frequency_penalty", "top_logprobs", "max_tool_calls", "service_tier"):
        assert f"'{field}' is a required property" in found
    assert "$.tools[0]: 'strict' is a required property" in found
    assert "$.tools[0]: 'description' is a required property" in found


# ---------------------------------------------------------------- the flows, over each transport


def test_a_text_turn_validates_over_http(client: OpenAI) -> None:
    data = http_json(client, input="Say hello.")
    assert data["status"] == "completed" and data["output"][0]["type"] == "message"


def test_a_text_turn_validates_over_sse(client: OpenAI) -> None:
    events = sse_events(client, input="Say hello.")
    kinds = {e["type"] for e in events}
    assert {"response.created", "response.in_progress", "response.output_text.delta"} <= kinds
    assert events[-1]["type"] == "response.completed"


def test_a_text_turn_validates_over_websocket(ws: Any) -> None:
    frames = ws_answer(ws, input="Say hello.", store=False)
    assert frames[0]["type"] == "response.created" and frames[-1]["type"] == "response.completed"


def call_body() -> dict[str, Any]:
    return {"input": "Read the README.", "tools": [READ_FILE_TOOL, NOW_TOOL], "tool_choice": "required"}


def assert_tools_echoed(response: dict[str, Any]) -> None:
    read_file, now = response["tools"]
    assert read_file == READ_FILE_TOOL  # all five fields were sent: echoed as they were
    assert now == {**NOW_TOOL, "description": None, "parameters": None, "strict": None}


def test_a_function_call_turn_and_its_answer_validate_over_http(client: OpenAI) -> None:
    first = http_json(client, **call_body())
    assert_tools_echoed(first)
    [call] = first["output"]
    assert call["type"] == "function_call"
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "# labkit"}
    second = http_json(client, input=[answer], previous_response_id=first["id"])
    assert second["output"][0]["type"] == "message"


def test_a_function_call_turn_validates_over_sse(client: OpenAI) -> None:
    events = sse_events(client, **call_body())
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    assert_tools_echoed(events[0]["response"])
    assert_tools_echoed(events[-1]["response"])


def test_a_function_call_turn_and_its_answer_validate_over_websocket(ws: Any) -> None:
    first = ws_answer(ws, store=False, **call_body())[-1]["response"]
    assert_tools_echoed(first)
    [call] = first["output"]
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "# labkit"}
    frames = ws_answer(ws, store=False, input=[answer], previous_response_id=first["id"])
    assert frames[-1]["type"] == "response.completed"


def test_an_incomplete_turn_validates_over_http(client: OpenAI) -> None:
    data = http_json(client, input=LONG, max_output_tokens=16)
    assert data["status"] == "incomplete"
    assert data["incomplete_details"] == {"reason": "max_output_tokens"}


def test_an_incomplete_turn_validates_over_sse(client: OpenAI) -> None:
    events = sse_events(client, input=LONG, max_output_tokens=16)
    assert events[-1]["type"] == "response.incomplete"


def test_an_incomplete_turn_validates_over_websocket(ws: Any) -> None:
    frames = ws_answer(ws, input=LONG, max_output_tokens=16, store=False)
    assert frames[-1]["type"] == "response.incomplete"


def test_a_stored_response_validates_when_retrieved(client: OpenAI) -> None:
    created = http_json(client, input="Say hello.", tools=[NOW_TOOL])
    raw = client.responses.with_raw_response.retrieve(created["id"])
    stored = raw.http_response.json()
    validate("ResponseResource", stored)
    assert stored == created


def test_the_compact_resource_validates(client: OpenAI) -> None:
    first = http_json(client, **call_body())
    [call] = first["output"]
    window = [
        {"role": "user", "content": "Read the README."},
        call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "# labkit\n" * 50},
    ]
    raw = client.responses.with_raw_response.compact(model=MODEL, input=window)
    data = raw.http_response.json()
    validate("CompactResource", data)
    assert [item["type"] for item in data["output"]] == ["message", "compaction"]


# ---------------------------------------------------------------- settings the Response echoes


def test_the_new_settings_are_accepted_and_echoed(client: OpenAI) -> None:
    data = http_json(
        client,
        input="Say hello.",
        top_logprobs=3,
        max_tool_calls=2,
        service_tier="flex",
        reasoning={"effort": "low"},
        text={"verbosity": "low"},
        extra_body={"presence_penalty": 0.5, "frequency_penalty": -1},  # not among the SDK's arguments
    )
    assert (data["presence_penalty"], data["frequency_penalty"]) == (0.5, -1)
    assert (data["top_logprobs"], data["max_tool_calls"], data["service_tier"]) == (3, 2, "flex")
    assert data["reasoning"] == {"effort": "low", "summary": None}
    assert data["text"] == {"verbosity": "low", "format": {"type": "text"}}


def test_defaults_are_echoed_when_the_request_leaves_settings_out(client: OpenAI) -> None:
    data = http_json(client, input="Say hello.")
    assert (data["presence_penalty"], data["frequency_penalty"], data["top_logprobs"]) == (0, 0, 0)
    assert data["max_tool_calls"] is None
    assert data["service_tier"] == "default"  # what "auto" (the default) is served at


def test_nulls_the_specification_allows_mean_the_default(server: LabkitServer) -> None:
    body = {"model": MODEL, "input": "Hi", "tools": None, "tool_choice": None, "parallel_tool_calls": None}
    reply = httpx.post(f"{server.base_url}/responses", json=body, headers=auth_headers(), timeout=30)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    validate("ResponseResource", data)
    assert (data["tools"], data["tool_choice"], data["parallel_tool_calls"]) == ([], "auto", True)


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("presence_penalty", 2.5, "invalid_value"),
        ("frequency_penalty", "0", "invalid_type"),
        ("top_logprobs", 21, "invalid_value"),
        ("top_logprobs", 1.5, "invalid_type"),
        ("max_tool_calls", 0, "invalid_value"),
        ("service_tier", "gold", "invalid_value"),
    ],
)
def test_the_new_settings_are_validated(server: LabkitServer, field: str, value: Any, code: str) -> None:
    body = {"model": MODEL, "input": "Hi", field: value}
    reply = httpx.post(f"{server.base_url}/responses", json=body, headers=auth_headers(), timeout=30)
    assert reply.status_code == 400
    validate("ErrorBody", reply.json())
    assert (reply.json()["error"]["param"], reply.json()["error"]["code"]) == (field, code)


# ---------------------------------------------------------------- errors


def test_a_400_body_validates(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="Hi", previous_response_id="resp_missing")
    assert error_body(info.value, 400)["code"] == "previous_response_not_found"


def test_a_400_before_a_stream_starts_is_a_json_body_that_validates(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="Hi", previous_response_id="resp_missing", stream=True)
    assert info.value.response.headers["content-type"].startswith("application/json")
    assert error_body(info.value, 400)["param"] == "previous_response_id"


def test_a_404_body_validates(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.retrieve("resp_missing")
    error = error_body(info.value, 404)
    assert (error["type"], error["code"]) == ("not_found_error", "not_found")


def test_a_websocket_error_event_validates(ws: Any) -> None:
    [error] = ws_answer(ws, input="Hi", previous_response_id="resp_missing", store=False)
    assert error["status"] == 400 and error["error"]["code"] == "previous_response_not_found"


def test_the_sse_error_event_shape_meets_the_specification() -> None:
    """No flow makes a running stream fail, so the shape is checked where it is built."""
    for err in (invalid_request("Bad.", code="invalid_value"), previous_response_not_found("resp_x")):
        validate("ErrorStreamingEvent", err.sse_event(3))


# ---------------------------------------------------------------- a tool output must answer a call


def orphan(call_id: str = "call_nobody_made") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def assert_no_tool_call(error: dict[str, Any], call_id: str, index: int) -> None:
    assert error["message"] == f"No tool call found for function call output with call_id {call_id}."
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        f"input[{index}].call_id",
        "invalid_value",
    )


@pytest.mark.parametrize("stream", [False, True])
def test_an_output_that_answers_no_call_is_refused_over_http(client: OpenAI, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model=MODEL, input=[{"role": "user", "content": "Hi"}, orphan()], stream=stream
        )
    assert_no_tool_call(error_body(info.value, 400), "call_nobody_made", 1)


def test_an_output_for_a_call_of_another_conversation_is_refused(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, **call_body())
    unrelated = client.responses.create(model=MODEL, input="Hi")
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model=MODEL, input=[orphan(first.output[0].call_id)], previous_response_id=unrelated.id
        )
    assert_no_tool_call(error_body(info.value, 400), first.output[0].call_id, 0)


def test_valid_replays_are_accepted(client: OpenAI) -> None:
    """The shapes SDKs and Codex send: a chained answer, a full replay (ids left out), an old call."""
    first = client.responses.create(model=MODEL, **call_body())
    call = first.output[0]
    # previous_response_id and only the answer (openai-agents, labkit's own client)
    second = client.responses.create(
        model=MODEL, input=[orphan(call.call_id)], previous_response_id=first.id, tools=[READ_FILE_TOOL]
    )
    # the whole history replayed, the call without id or status (Codex, store=false)
    replayed_call = {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": "{}"}
    third = client.responses.create(
        model=MODEL,
        store=False,
        input=[{"role": "user", "content": "Read it."}, replayed_call, orphan(call.call_id)],
    )
    # an answer to a call further back in the stored chain
    fourth = client.responses.create(
        model=MODEL, input=[orphan(call.call_id)], previous_response_id=second.id
    )
    assert {r.status for r in (second, third, fourth)} == {"completed"}


def test_an_orphan_output_is_refused_in_websocket_mode_and_evicts_the_cached_response(ws: Any) -> None:
    first = ws_answer(ws, store=False, **call_body())[-1]["response"]
    call_id = first["output"][0]["call_id"]
    [error] = ws_answer(ws, store=False, input=[orphan()], previous_response_id=first["id"])
    assert error["status"] == 400
    assert_no_tool_call(error["error"], "call_nobody_made", 0)
    # The failed turn evicted first from the connection cache, and it was never stored.
    [gone] = ws_answer(ws, store=False, input=[orphan(call_id)], previous_response_id=first["id"])
    assert gone["error"]["code"] == "previous_response_not_found"
