"""A room of buggy clients over HTTP: every bad input is a 4xx in the API's shape, and the server
keeps serving (docs/protocol.md §5 and "Limits").

One server with keys and small limits serves the module; raw httpx, so nothing is smoothed over
by an SDK. The SSE numbering fix is checked on ``sse_stream`` itself, with a turn that fails
after queueing events faster than the stream yields them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from labkit.client.launcher import LabkitServer
from tests.helpers import (
    KEY_A,
    KEY_B,
    MAX_BODY,
    MAX_OUTPUT,
    MAX_TRACES,
    assert_api_error,
    assert_serving,
    bearer,
    strict_json,
)

pytestmark = pytest.mark.slow  # hardening

MODEL = "labkit-spark"


def post(server: LabkitServer, body: Any, *, key: str = KEY_A, path: str = "/responses") -> httpx.Response:
    """POST a body: a dict as JSON, a str or bytes exactly as given."""
    content = json.dumps(body) if isinstance(body, dict) else body
    headers = {**bearer(key), "content-type": "application/json"}
    return httpx.post(f"{server.base_url}{path}", content=content, headers=headers, timeout=30)


# ---------------------------------------------------------------- text that is not valid Unicode

SURROGATE_BODIES = [
    pytest.param('{"model": "labkit-spark", "input": "\\ud800"}', "input", id="input"),
    pytest.param('{"model": "\\udfff", "input": "hi"}', "model", id="model"),
    pytest.param(
        '{"model": "labkit-spark", "input": [{"role": "user", "content": [{"type": "input_text", '
        '"text": "ok \\ud83d"}]}]}',
        "input[0].content[0].text",
        id="content-part",
    ),
    pytest.param(
        '{"model": "labkit-spark", "input": "hi", "instructions": "be \\udc00 brief"}',
        "instructions",
        id="instructions",
    ),
    pytest.param(
        '{"model": "labkit-spark", "input": "hi", "tools": [{"type": "function", "name": "f\\ud800"}]}',
        "tools[0].name",
        id="tool-name",
    ),
    pytest.param(
        '{"model": "labkit-spark", "input": "hi", "metadata": {"k": "\\ud800"}}', "metadata.k", id="metadata"
    ),
]


@pytest.mark.parametrize(("raw", "param"), SURROGATE_BODIES)
@pytest.mark.parametrize("stream", [False, True])
def test_lone_surrogates_are_a_400_naming_the_param(
    room: LabkitServer, raw: str, param: str, stream: bool
) -> None:
    if stream:
        raw = raw[:-1] + ', "stream": true}'
    error = assert_api_error(post(room, raw), 400)
    assert error["param"] == param and error["code"] == "invalid_value"
    assert "Unicode" in error["message"]


def test_a_lone_surrogate_in_a_key_is_refused_and_the_answer_is_valid_utf8(room: LabkitServer) -> None:
    reply = post(room, '{"model": "labkit-spark", "input": "hi", "metadata": {"\\udc00": "x"}}')
    reply.content.decode("utf-8")  # strict: the param naming the key is itself encodable
    assert assert_api_error(reply, 400)["code"] == "invalid_value"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "labkit-spark", "input": "\xed\xa0\x80"}',  # a surrogate encoded as UTF-8
        b'{"model": "labkit-spark", "input": "\xff\xfe"}',
        b"\xef\xbb\xbf{}",  # a byte-order mark
    ],
)
def test_bytes_that_are_not_utf8_are_a_400(room: LabkitServer, raw: bytes) -> None:
    assert_api_error(post(room, raw), 400)


def test_a_surrogate_pair_is_valid_unicode(room: LabkitServer) -> None:
    reply = post(room, '{"model": "labkit-spark", "input": "a smile \\ud83d\\ude00", "store": false}')
    assert reply.status_code == 200, reply.text


# ---------------------------------------------------------------- NaN, Infinity and huge numbers


@pytest.mark.parametrize(
    "raw",
    [
        '{"model": "labkit-spark", "input": "hi", "temperature": NaN}',
        '{"model": "labkit-spark", "input": "hi", "top_p": Infinity}',
        '{"model": "labkit-spark", "input": "hi", "metadata": {"a": "b"}, "x": -Infinity}',
        '{"model": "labkit-spark", "input": "hi", "temperature": 1e999}',
        '{"model": "labkit-spark", "input": "hi", "text": {"format": {"type": "text", "n": NaN}}}',
        '{"model": "labkit-spark", "input": "hi", "max_output_tokens": ' + "9" * 5000 + "}",
    ],
)
def test_nan_infinity_and_oversized_numbers_are_refused(room: LabkitServer, raw: str) -> None:
    assert_api_error(post(room, raw), 400)
    assert_api_error(post(room, raw, path="/responses/compact"), 400)


def test_nothing_unreadable_is_ever_stored(room: LabkitServer) -> None:
    """The old failure: NaN accepted, stored, and every GET a 500. Now refused, so GETs stay JSON."""
    assert_api_error(post(room, '{"model": "labkit-spark", "input": "hi", "reasoning": {"x": NaN}}'), 400)
    made = post(room, {"model": MODEL, "input": "hi", "reasoning": {"x": 1.5}})
    assert made.status_code == 200
    got = httpx.get(f"{room.base_url}/responses/{made.json()['id']}", headers=bearer(), timeout=30)
    assert got.status_code == 200 and strict_json(got.text)["reasoning"]["x"] == 1.5


# ---------------------------------------------------------------- nesting and size


@pytest.mark.parametrize("depth", [65, 1_000, 10_000])
def test_deep_nesting_is_a_400_before_parsing(room: LabkitServer, depth: int) -> None:
    raw = '{"model": "labkit-spark", "input": "hi", "metadata": ' + "[" * depth + "]" * depth + "}"
    error = assert_api_error(post(room, raw), 400)
    assert "nests" in error["message"]


def test_nesting_within_the_limit_is_served(room: LabkitServer) -> None:
    deep: Any = {}
    for _ in range(50):
        deep = {"x": deep}
    reply = post(room, {"model": MODEL, "input": "hi", "reasoning": deep, "store": False})
    assert reply.status_code == 200, reply.text[:300]


def test_a_body_over_the_limit_is_a_413(room: LabkitServer) -> None:
    error = assert_api_error(post(room, {"model": MODEL, "input": "x" * MAX_BODY}), 413)
    assert error["code"] == "request_too_large" and str(MAX_BODY) in error["message"]


def test_a_chunked_body_over_the_limit_is_a_413(room: LabkitServer) -> None:
    """No content-length to go by: the body is read only as far as the limit."""

    def chunks() -> Iterator[bytes]:
        yield b'{"model": "labkit-spark", "input": "'
        for _ in range(64):
            yield b"x" * 4096
        yield b'"}'

    reply = httpx.post(f"{room.base_url}/responses", content=chunks(), headers=bearer(), timeout=30)
    assert_api_error(reply, 413)
    assert_serving(room)


def test_a_50_mb_body_is_refused_without_reading_it(room: LabkitServer) -> None:
    reply = post(room, b'{"model": "labkit-spark", "input": "' + b"x" * 50_000_000 + b'"}')
    assert_api_error(reply, 413)
    assert_serving(room)


# ---------------------------------------------------------------- tool schemas

BAD_SCHEMAS = [
    pytest.param({"type": "object", "properties": [1, 2]}, "properties", id="properties-array"),
    pytest.param({"type": "object", "properties": {"a": 3}}, "properties", id="property-not-schema"),
    pytest.param({"type": "object", "required": "a"}, "required", id="required-string"),
    pytest.param({"type": "object", "required": [1]}, "required", id="required-numbers"),
    pytest.param({"type": "array", "minItems": "3"}, "minItems", id="minItems-string"),
    pytest.param({"type": "array", "minItems": -1}, "minItems", id="minItems-negative"),
    pytest.param({"type": "array", "minItems": 2.5}, "minItems", id="minItems-fraction"),
    pytest.param({"type": "string", "maxLength": True}, "maxLength", id="maxLength-bool"),
    pytest.param({"enum": 5}, "enum", id="enum-number"),
    pytest.param({"allOf": {"type": "string"}}, "allOf", id="allOf-object"),
    pytest.param({"anyOf": []}, "anyOf", id="anyOf-empty"),
    pytest.param({"oneOf": [3]}, "oneOf", id="oneOf-not-schemas"),
    pytest.param({"type": 7}, "type", id="type-number"),
    pytest.param({"type": ["string", 1]}, "type", id="type-list-mixed"),
    pytest.param({"type": "strnig"}, "type", id="type-unknown"),
    pytest.param({"type": "integer", "minimum": "0"}, "minimum", id="minimum-string"),
    pytest.param({"type": "array", "items": 3}, "items", id="items-number"),
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "object", "required": {}}}}, "required", id="deep"
    ),
]


@pytest.mark.parametrize(("schema", "keyword"), BAD_SCHEMAS)
def test_invalid_tool_schemas_are_a_400(room: LabkitServer, schema: dict[str, Any], keyword: str) -> None:
    tool = {"type": "function", "name": "f", "parameters": schema}
    reply = post(room, {"model": MODEL, "input": "hi", "tools": [tool], "tool_choice": "required"})
    error = assert_api_error(reply, 400)
    assert error["code"] == "invalid_function_parameters"
    assert error["param"].startswith("tools[0].parameters") and error["param"].endswith(keyword)


@pytest.mark.parametrize(
    "raw_schema",
    [
        '{"type": "number", "minimum": NaN}',
        '{"type": "number", "maximum": Infinity}',
        '{"type": "number", "exclusiveMinimum": -1e400}',
    ],
)
def test_non_finite_schema_bounds_are_a_400(room: LabkitServer, raw_schema: str) -> None:
    raw = (
        '{"model": "labkit-spark", "input": "hi", "tool_choice": "required", "tools": '
        '[{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"n": '
        + raw_schema
        + "}}}]}"
    )
    assert_api_error(post(room, raw), 400)


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "array", "minItems": 1e30, "items": {"type": "string"}},
        {"type": "array", "minItems": 10**40, "items": {"type": "array", "minItems": 10**40}},
        {"type": "string", "minLength": 10**12},
        {"type": "string", "minLength": 1e300, "maxLength": 1e301},
        {"type": "integer", "minimum": 10**300},
        {"type": "object", "properties": {f"p{i}": {"type": "array", "minItems": 99} for i in range(40)}},
    ],
)
def test_enormous_schema_bounds_are_clamped_not_built(room: LabkitServer, prop: dict[str, Any]) -> None:
    """Valid schemas, absurd numbers: the call comes back at once, with small arguments."""
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"p": prop}}}
    body = {"model": MODEL, "input": "hi", "tools": [tool], "tool_choice": "required", "store": False}
    reply = post(room, body)
    assert reply.status_code == 200, reply.text[:300]
    [call] = reply.json()["output"]
    assert call["type"] == "function_call" and len(call["arguments"]) < 100_000
    json.loads(call["arguments"])


def test_draft4_boolean_exclusive_bounds_are_accepted(room: LabkitServer) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 3, "exclusiveMinimum": True}},
        "required": ["n"],
    }
    tool = {"type": "function", "name": "f", "parameters": schema}
    body = {"model": MODEL, "input": "hi", "tools": [tool], "tool_choice": "required", "store": False}
    reply = post(room, body)
    assert reply.status_code == 200, reply.text[:300]
    assert json.loads(reply.json()["output"][0]["arguments"])["n"] == 4


# ---------------------------------------------------------------- sizes the client picks


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"input": "Write 50000000 tokens."}, id="fifty-million-tokens"),
        pytest.param({"input": f"Write {'7' * 5000} tokens."}, id="thousands-of-digits"),
        pytest.param(
            {"input": "Write a long essay.", "max_output_tokens": 10**15}, id="long-and-huge-budget"
        ),
        pytest.param({"input": "Write 1,000,000,000 output tokens."}, id="commas"),
    ],
)
def test_the_answer_stops_at_the_servers_output_cap(room: LabkitServer, body: dict[str, Any]) -> None:
    reply = post(room, {"model": MODEL, "store": False, **body})
    assert reply.status_code == 200, reply.text[:300]
    response = reply.json()
    assert response["status"] == "completed"
    assert response["usage"]["output_tokens"] == MAX_OUTPUT


def test_a_long_run_of_digits_in_the_prompt_is_linear(room: LabkitServer) -> None:
    """A run of digits not followed by 'tokens' once made the token-count regex quadratic."""
    reply = post(room, {"model": MODEL, "input": "1" * 60_000, "store": False})
    assert reply.status_code == 200, reply.text[:300]


# ---------------------------------------------------------------- scenario names


@pytest.mark.parametrize(
    "name",
    [
        "x" * 512,
        "../../etc/passwd",
        "nul\x00byte",
        "synthetic:turns=" + "9" * 300,
        "synthetic:turns=99999999",
        "synthetic:output_tokens=0",
        "synthetic:instruction_tokens=999999999",
        "synthetic:turns=²",
        "synthetic:frobs=3",
    ],
)
def test_bad_scenario_names_are_a_400(room: LabkitServer, name: str) -> None:
    reply = post(room, {"model": MODEL, "input": "hi", "metadata": {"labkit_scenario": name}})
    error = assert_api_error(reply, 400)
    assert error["param"] == "metadata.labkit_scenario"


def test_metadata_values_and_keys_are_bounded(room: LabkitServer) -> None:
    error = assert_api_error(post(room, {"model": MODEL, "input": "hi", "metadata": {"k": "v" * 513}}), 400)
    assert error["param"] == "metadata.k"
    error = assert_api_error(post(room, {"model": MODEL, "input": "hi", "metadata": {"k" * 65: "v"}}), 400)
    assert error["param"] == "metadata"


def test_a_synthetic_scenario_in_range_is_served(room: LabkitServer) -> None:
    body = {
        "model": MODEL,
        "input": "go",
        "metadata": {"labkit_scenario": "synthetic:turns=2,output_tokens=8"},
    }
    reply = post(room, {**body, "store": False})
    assert reply.status_code == 200, reply.text[:300]


# ---------------------------------------------------------------- keys

ENDPOINTS = [
    ("POST", "/v1/responses"),
    ("POST", "/v1/responses/compact"),
    ("GET", "/v1/responses/resp_x"),
    ("DELETE", "/v1/responses/resp_x"),
    ("GET", "/v1/responses/resp_x/input_items"),
    ("GET", "/v1/models"),
    ("GET", "/v1/labkit/traces?response_id=resp_x"),
]
BAD_AUTH = [
    pytest.param(None, id="no-key"),
    pytest.param(b"Bearer sk-wrong", id="wrong-key"),
    pytest.param("Bearer sk-room-\u00e9".encode(), id="non-ascii-utf8"),
    pytest.param(b"Bearer sk-\xff\xfe", id="non-ascii-latin1"),
    pytest.param(b"Bearer sk-room-a\x7f", id="control-character"),
    pytest.param(b"Basic sk-room-a", id="not-bearer"),
]


@pytest.mark.parametrize("auth", BAD_AUTH)
@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_every_endpoint_answers_a_bad_key_with_401(
    room: LabkitServer, method: str, path: str, auth: bytes | None
) -> None:
    url = room.base_url.removesuffix("/v1") + path
    headers = [(b"content-type", b"application/json")]
    if auth is not None:
        headers.append((b"authorization", auth))
    body = json.dumps({"model": MODEL, "input": "hi"}).encode() if method == "POST" else None
    reply = httpx.request(method, url, headers=headers, content=body, timeout=30)
    error = assert_api_error(reply, 401)
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"


def test_healthz_needs_no_key(room: LabkitServer) -> None:
    reply = httpx.get(room.base_url.removesuffix("/v1") + "/healthz", timeout=30)
    assert reply.status_code == 200 and reply.json() == {"status": "ok"}


def test_stored_responses_items_and_traces_stay_with_their_key(room: LabkitServer) -> None:
    made = post(room, {"model": MODEL, "input": "mine", "store": True})
    assert made.status_code == 200
    rid = made.json()["id"]
    base = room.base_url
    for key, found in ((KEY_A, 200), (KEY_B, 404)):
        for url in (f"{base}/responses/{rid}", f"{base}/responses/{rid}/input_items"):
            assert httpx.get(url, headers=bearer(key), timeout=30).status_code == found
        traces = httpx.get(
            f"{base}/labkit/traces", params={"response_id": rid}, headers=bearer(key), timeout=30
        )
        assert traces.status_code == found
    chained = post(room, {"model": MODEL, "input": "go on", "previous_response_id": rid}, key=KEY_B)
    assert assert_api_error(chained, 400)["code"] == "previous_response_not_found"
    assert httpx.delete(f"{base}/responses/{rid}", headers=bearer(KEY_B), timeout=30).status_code == 404
    assert httpx.get(f"{base}/responses/{rid}", headers=bearer(KEY_A), timeout=30).status_code == 200


# ---------------------------------------------------------------- traces kept in memory


def test_traces_beyond_the_cap_are_evicted_oldest_first(room: LabkitServer) -> None:
    ids = []
    for i in range(MAX_TRACES + 2):
        reply = post(room, {"model": MODEL, "input": f"warm {i}", "generate": False, "store": False})
        ids.append(reply.json()["id"])
    found = [
        httpx.get(
            f"{room.base_url}/labkit/traces", params={"response_id": rid}, headers=bearer(), timeout=30
        ).status_code
        for rid in ids
    ]
    assert found == [404, 404] + [200] * MAX_TRACES


# ---------------------------------------------------------------- SSE: the closing error's number


def test_sse_error_is_numbered_after_the_last_event_produced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn queues five events and fails before the stream has yielded them all: the error
    takes number 5, not the number after whichever event the stream had sent by then."""
    from labkit.server import http

    async def respond(pipeline: Any, turn: Any, emit: Any) -> None:
        for n in range(5):
            await emit({"type": "response.output_text.delta", "delta": "x", "sequence_number": n})
        raise RuntimeError("boom")

    monkeypatch.setattr(http, "respond", respond)

    async def read_all() -> list[dict[str, Any]]:
        events = []
        async for chunk in http.sse_stream(None, None):  # type: ignore[arg-type]
            events.append(json.loads(chunk.decode().split("data: ", 1)[1]))
        return events

    events = asyncio.run(read_all())
    assert [e["sequence_number"] for e in events] == list(range(6))
    assert events[-1]["type"] == "error" and events[-1]["code"] == "server_error"
    assert "boom" not in json.dumps(events[-1])


def test_sse_event_that_is_not_json_ends_the_stream_with_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The safety net: an event holding NaN is never framed; a well-formed error ends the body."""
    from labkit.server import http

    async def respond(pipeline: Any, turn: Any, emit: Any) -> None:
        await emit({"type": "response.created", "sequence_number": 0})
        await emit({"type": "response.in_progress", "x": float("nan"), "sequence_number": 1})

    monkeypatch.setattr(http, "respond", respond)

    async def read_all() -> list[str]:
        return [chunk.decode() async for chunk in http.sse_stream(None, None)]  # type: ignore[arg-type]

    frames = asyncio.run(read_all())
    events = [strict_json(frame.split("data: ", 1)[1]) for frame in frames]
    assert [e["type"] for e in events] == ["response.created", "error"]
    assert events[-1]["sequence_number"] == 1  # in place of the event that could not be sent


def test_streamed_frames_are_strict_json(room: LabkitServer) -> None:
    body = {"model": MODEL, "input": "Write 40 tokens.", "stream": True, "store": False, "temperature": 0.5}
    with httpx.stream("POST", f"{room.base_url}/responses", json=body, headers=bearer(), timeout=30) as reply:
        frames = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
    events = [strict_json(frame) for frame in frames]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
