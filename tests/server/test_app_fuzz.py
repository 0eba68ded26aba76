"""Fuzz: bounded streams of broken requests over HTTP (JSON and SSE) and WebSocket frames.

Each body starts as a valid create and gets one mutation from the classes that once broke the
server: strings that are not valid Unicode, NaN and Infinity, numbers of thousands of digits,
deep nesting, tool schemas that are not JSON Schema (or absurdly large), client-picked sizes,
scenario names, bytes that are not UTF-8. Every answer must be a well-formed response or an
error in the API's shape, never a 5xx or a cut stream, and ``/healthz`` must answer within a
second throughout (a poller thread beside the fuzz).

Bounded: ``max_examples`` per path, no deadline (the network), loopback only.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from labkit.client.launcher import LabkitServer
from tests.helpers import KEY_A, TERMINAL, assert_api_error, assert_error_event, bearer, recv, strict_json

pytestmark = pytest.mark.slow  # fuzzing

EXAMPLES = 120  # per path; each is one request against a local-profile server
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
HEALTH_TIMEOUT_S = 1.0  # the bound: /healthz answers within a second, throughout

# ---------------------------------------------------------------- the server and its watchdog


class HealthPoller:
    """Polls /healthz in a thread; every answer must be a 200 within a second."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.failures: list[str] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=HEALTH_TIMEOUT_S) as client:
            while not self._stop.is_set():
                try:
                    reply = client.get(self.url)
                    if reply.status_code != 200 or reply.json() != {"status": "ok"}:
                        self.failures.append(f"{reply.status_code} {reply.text[:100]}")
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                self.polls += 1
                self._stop.wait(0.05)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def health(room: LabkitServer) -> Iterator[HealthPoller]:
    with HealthPoller(room.base_url.removesuffix("/v1") + "/healthz") as poller:
        yield poller
    assert poller.polls > 0
    assert not poller.failures, poller.failures[:5]


# ---------------------------------------------------------------- generators

SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"])
plain_text = st.text(max_size=20)
broken_text = st.builds(lambda a, s, b: a + s + b, plain_text, SURROGATES, plain_text)
texts = plain_text | broken_text
numbers = (
    st.integers(-(10**40), 10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, -1, 1e30, 1e300, 10**18, 2.5, -0.0])
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "previous_response_id",
    "store",
    "max_output_tokens",
    "temperature",
    "top_p",
    "top_logprobs",
    "metadata",
    "reasoning",
    "text",
    "include",
    "truncation",
    "prompt_cache_key",
    "service_tier",
    "parallel_tool_calls",
    "max_tool_calls",
    "generate",
    "stream_id",
]
SCHEMA_KEYWORDS = [
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "const",
    "allOf",
    "anyOf",
    "oneOf",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "additionalProperties",
    "$defs",
    "not",
]
# Values a schema keyword can hold, valid or not, and enormous ones.
schema_values = (
    json_values
    | st.sampled_from(
        ["object", "array", "string", "integer", "number", "boolean", "null", ["string", "null"]]
    )
    | st.sampled_from([1e30, 10**40, -1, 0, 2.5, 10**9])
    | st.just({"type": "array", "minItems": 10**12, "items": {"type": "string", "minLength": 10**12}})
)
schemas = st.recursive(
    st.dictionaries(st.sampled_from(SCHEMA_KEYWORDS), schema_values, max_size=4),
    lambda inner: st.fixed_dictionaries(
        {"type": st.sampled_from(["object", "array"])},
        optional={
            "properties": st.dictionaries(plain_text, inner, max_size=3),
            "items": inner,
            "minItems": st.sampled_from([1, 3, 1e30, 10**40]),
            "required": st.lists(plain_text, max_size=2),
        },
    ),
    max_leaves=8,
)
RAW_VALUES = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400"]) | st.builds(
    lambda n: "9" * n, st.integers(4_000, 6_000)
)
deep = st.builds(lambda d, c: (c[0] * d) + (c[1] * d), st.integers(65, 5_000), st.sampled_from(["[]", "{}"]))
asks = st.builds(
    lambda n, word: f"Write {n} {word}.",
    st.integers(0, 10**12) | st.builds(lambda k: "7" * k, st.integers(10, 3_000)),
    st.sampled_from(["tokens", "output tokens", "token"]),
) | st.sampled_from(["Write a long essay.", "Explain at length.", "1" * 5_000])
scenarios = texts | st.builds(
    lambda key, value: f"synthetic:{key}={value}",
    st.sampled_from(["turns", "output_tokens", "tool_tokens", "instruction_tokens", "nope"]),
    st.integers(-5, 10**12) | st.builds(lambda k: "9" * k, st.integers(10, 500)),
)


def base_body(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": draw(st.sampled_from(["labkit-spark", "labkit-burst"])), "input": "hi"}
    body["store"] = draw(st.booleans())
    if draw(st.booleans()):
        params = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        body["tools"] = [{"type": "function", "name": "read_file", "parameters": params}]
        body["tool_choice"] = draw(st.sampled_from(["auto", "required", "none"]))
    return body


@st.composite
def broken_requests(draw: st.DrawFn) -> bytes:
    """One create body, as the raw bytes a buggy client might send."""
    body = base_body(draw)
    kind = draw(
        st.sampled_from(["field", "schema", "raw-value", "deep", "ask", "scenario", "bytes", "budget"])
    )
    if kind == "field":
        body[draw(st.sampled_from(FIELDS))] = draw(json_values)
    elif kind == "schema":
        schema = draw(schemas)
        body["tools"] = [{"type": "function", "name": "f", "parameters": schema}]
        body["tool_choice"] = "required"
    elif kind == "ask":
        body["input"] = draw(asks)
    elif kind == "budget":
        body["input"] = draw(asks)
        body["max_output_tokens"] = draw(st.integers(16, 10**15))
    elif kind == "scenario":
        body["metadata"] = {"labkit_scenario": draw(scenarios)}
    raw = json.dumps(body)  # ensure_ascii: a lone surrogate goes out as a \\ud800 escape
    if kind in ("raw-value", "deep"):
        value = draw(RAW_VALUES) if kind == "raw-value" else draw(deep)
        field = draw(st.sampled_from(["temperature", "metadata", "reasoning", "max_output_tokens", "input"]))
        raw = raw[:-1] + f', "{field}": {value}}}'
    data = raw.encode()
    if kind == "bytes":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return data


# ---------------------------------------------------------------- checks


def check_http_answer(reply: httpx.Response, stream: bool) -> None:
    if reply.status_code != 200:
        assert_api_error(reply)  # a 4xx in the API's shape, never a 5xx
        return
    if not stream:
        response = strict_json(reply.text)
        assert response["object"] == "response" and response["status"] in ("completed", "incomplete")
        return
    # SSE ends a line at CR, LF or CRLF only (str.splitlines would also cut at U+0085 and U+2028,
    # which a JSON string in a data line may carry as they are)
    lines = re.split(r"\r\n|\r|\n", reply.text)
    frames = [line[6:] for line in lines if line.startswith("data: ")]
    events = [strict_json(frame) for frame in frames]
    assert events, reply.text[:300]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] in TERMINAL or events[-1]["type"] == "error", events[-1]


# ---------------------------------------------------------------- the fuzz


@FUZZ
@given(data=broken_requests(), stream=st.booleans())
def test_http_fuzz(room: LabkitServer, health: HealthPoller, data: bytes, stream: bool) -> None:
    if stream and data.endswith(b"}"):
        data = data[:-1] + b', "stream": true}'
    headers = {**bearer(KEY_A), "content-type": "application/json"}
    reply = httpx.post(f"{room.base_url}/responses", content=data, headers=headers, timeout=30)
    check_http_answer(reply, stream and reply.headers.get("content-type", "").startswith("text/event-stream"))


@pytest.fixture(scope="module")
def ws(room: LabkitServer) -> Iterator[ClientConnection]:
    """One connection for the whole WebSocket fuzz: it must survive every frame."""
    with connect(room.ws_url, additional_headers=bearer(KEY_A), max_size=None) as conn:
        # Open the "side" lane first, so fuzzed stream_ids cannot use up the 32 lanes before it.
        conn.send(
            json.dumps(
                {
                    "type": "response.create",
                    "model": "labkit-spark",
                    "input": "hi",
                    "generate": False,
                    "store": False,
                    "stream_id": "side",
                }
            )
        )
        while recv(conn)["type"] not in TERMINAL:
            pass
        yield conn


@FUZZ
@given(data=broken_requests(), binary=st.booleans(), lane=st.sampled_from([None, "side"]))
def test_websocket_fuzz(
    ws: ClientConnection, health: HealthPoller, data: bytes, binary: bool, lane: str | None
) -> None:
    frame = b'{"type": "response.create", ' + (b'"stream_id": "side", ' if lane else b"") + data[1:]
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError:
        binary = True  # a text frame must be UTF-8; the server would close with 1007 (tested apart)
    ws.send(frame if binary else text)
    events = []
    while True:
        event = recv(ws)  # strict JSON: no NaN on the wire
        events.append(event)
        if event["type"] == "error":
            assert_error_event(event, event["status"])
            assert 400 <= event["status"] < 500, event
            break
        if event["type"] in TERMINAL:
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
            break


def test_the_fuzzed_socket_still_serves_every_lane(ws: ClientConnection, health: HealthPoller) -> None:
    """Runs after the WebSocket fuzz (file order): the same connection answers real creates."""
    for lane in (None, "side"):
        extra = {"stream_id": lane} if lane else {}
        ws.send(json.dumps({"type": "response.create", "model": "labkit-spark", "input": "ok?", **extra}))
        while (event := recv(ws))["type"] not in TERMINAL:
            assert event["type"] != "error", event
        assert event["type"] == "response.completed"


# ---------------------------------------------------------------- the same classes, in process


@settings(max_examples=300, deadline=None, database=None)
@given(schema=schemas | json_values)
def test_schema_check_and_example_value_never_fail_unexpectedly(schema: Any) -> None:
    """Any value as ``parameters``: refused with an APIError, or rendered and answered, small."""
    from labkit.api.errors import APIError
    from labkit.api.tool_schema import check_schema
    from labkit.engine.arguments import example_value
    from labkit.engine.tool_namespace import tool_namespace

    value = example_value(schema)  # the policy never fails, whatever it is given
    assert len(json.dumps(value, allow_nan=False)) < 1_000_000
    if not isinstance(schema, dict):
        return
    try:
        check_schema(schema, "tools[0].parameters", "f")
    except APIError as err:
        assert err.status == 400 and err.code == "invalid_function_parameters"
        assert err.param is not None and err.param.startswith("tools[0].parameters")
        return
    tool_namespace([{"type": "function", "name": "f", "parameters": schema}])  # renders


@settings(max_examples=300, deadline=None, database=None)
@given(raw=st.binary(max_size=200) | texts | broken_requests() | broken_requests().map(repr))
def test_safe_loads_returns_json_or_a_400(raw: bytes | str) -> None:
    from labkit.api.errors import APIError
    from labkit.api.safejson import dumps, loads

    try:
        value = loads(raw)
    except APIError as err:
        assert err.status == 400
        return
    dumps(value)  # whatever was accepted can be sent back
