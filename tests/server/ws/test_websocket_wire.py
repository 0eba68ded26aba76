"""WebSocket mode on the wire: a raw ``websockets`` client, frame by frame.

Checks the contract of docs/protocol.md §3 that an SDK would hide: one JSON text frame per
event, the SSE event order, per-response sequence numbers, queueing on one socket,
the nested error event that never closes the connection, eviction after a failed turn,
``stream_id`` lanes, the connection lifetime and the auth check on the upgrade.

Ordering is asserted from the order frames arrive in, never from wall-clock time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from labkit.client.launcher import LabkitServer
from tests.helpers import (
    API_KEY,
    CALL_TURN_EVENTS,
    READ_FILE_TOOL,
    TEXT_TURN_EVENTS,
    auth_headers,
    collapse_deltas,
)
from tests.server.http_helpers import sse_frames

MODEL = "labkit-spark"
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
RECV_TIMEOUT = 30.0  # a safety net against a hung test, not a measurement
ERROR_KEYS = {"message", "type", "param", "code"}

# ---------------------------------------------------------------- a raw client


class Wire:
    """One raw WebSocket connection to ``/v1/responses``; every server frame is checked."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    def send(self, frame: dict[str, Any] | str) -> None:
        self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    def create(self, **body: Any) -> None:
        self.send({"type": "response.create", **body})

    def recv(self) -> dict[str, Any]:
        raw = self.ws.recv(timeout=RECV_TIMEOUT)
        assert isinstance(raw, str), f"expected a text frame, got {type(raw).__name__}"
        assert not raw.startswith(("event:", "data:")), "no SSE framing over WebSocket"
        event = json.loads(raw)
        assert isinstance(event, dict) and isinstance(event.get("type"), str), raw
        return event

    def collect(self, answers: int = 1) -> list[dict[str, Any]]:
        """Events up to and including the ``answers``-th terminal or error event."""
        events: list[dict[str, Any]] = []
        while answers:
            event = self.recv()
            events.append(event)
            if event["type"] in TERMINAL or event["type"] == "error":
                answers -= 1
        return events

    def turn(self, **body: Any) -> dict[str, Any]:
        """Send one create and return its answer: a terminal event or an error event."""
        self.create(**body)
        events = self.collect()
        if events[-1]["type"] == "error":
            assert len(events) == 1, f"an error answers the request alone: {events}"
        else:
            assert_one_response(events)
        return events[-1]

    def done(self, **body: Any) -> dict[str, Any]:
        answer = self.turn(**body)
        assert answer["type"] == "response.completed", answer
        return answer["response"]


@contextmanager
def wire(server: LabkitServer, key: str = API_KEY) -> Iterator[Wire]:
    with connect(server.ws_url, additional_headers=auth_headers(key)) as ws:
        yield Wire(ws)


def assert_one_response(events: list[dict[str, Any]]) -> None:
    """The events of exactly one response: numbered from 0, created first, terminal last."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in TERMINAL
    assert not [e for e in events[1:-1] if e["type"] in TERMINAL or e["type"] == "response.created"]
    rid = events[0]["response"]["id"]
    assert all(e["response"]["id"] == rid for e in events if "response" in e)
    item_ids = {item["id"] for item in events[-1]["response"]["output"]}
    assert {e["item_id"] for e in events if "item_id" in e} <= item_ids


def assert_error(event: dict[str, Any], code: str, param: str | None = None) -> None:
    """The nested WS error shape: ``{type, status, error: {message, type, param, code}}``."""
    assert event["type"] == "error", event
    assert event["status"] == 400
    assert set(event["error"]) == ERROR_KEYS
    assert event["error"]["type"] == "invalid_request_error"
    assert isinstance(event["error"]["message"], str) and event["error"]["message"]
    assert event["error"]["code"] == code
    assert event["error"]["param"] == param


def sse_types(server: LabkitServer, body: dict[str, Any]) -> list[str]:
    """The same request over HTTP with ``stream: true``: the SSE event names, in order."""
    reply, text = sse_frames(server, body)
    assert reply.status_code == 200
    return [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]


def traces(server: LabkitServer, response_id: str) -> dict[str, dict[str, Any]]:
    reply = httpx.get(
        f"{server.base_url}/labkit/traces", params={"response_id": response_id}, headers=auth_headers()
    )
    assert reply.status_code == 200, reply.text
    return {span["stage"]: span for span in reply.json()["data"]}


# ---------------------------------------------------------------- 11. frames and order


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({"input": "Say hello."}, TEXT_TURN_EVENTS, id="text"),
        pytest.param(
            {"input": "Read the README.", "tools": [READ_FILE_TOOL]}, CALL_TURN_EVENTS, id="function-call"
        ),
    ],
)
def test_events_are_json_text_frames_in_sse_order(
    server: LabkitServer, body: dict[str, Any], expected: list[str]
) -> None:
    request = {"model": MODEL, "store": False, **body}
    with wire(server) as w:
        w.create(**request, stream=True)  # `stream` is implicit over WS: ignored, not SSE
        events = w.collect()
    assert_one_response(events)
    types = [e["type"] for e in events]
    assert collapse_deltas(types) == expected
    assert collapse_deltas(sse_types(server, request)) == expected

    created, final = events[0]["response"], events[-1]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert final["status"] == "completed"
    assert set(final["usage"]) >= {"input_tokens", "output_tokens", "total_tokens", "input_tokens_details"}
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in added] == list(range(len(final["output"])))
    done_items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done_items == final["output"]
    text = "".join(e["delta"] for e in events if e["type"].endswith(".delta"))
    item = final["output"][0]
    assert text == (item["content"][0]["text"] if item["type"] == "message" else item["arguments"])
    assert "stream_id" not in events[0], "default-lane events carry no stream_id"


def test_sequence_numbers_restart_for_each_response(server: LabkitServer) -> None:
    with wire(server) as w:
        first = w.done(model=MODEL, input="One.", store=False)
        w.create(model=MODEL, input="Two.", previous_response_id=first["id"], store=False)
        events = w.collect()
    assert events[0]["sequence_number"] == 0
    assert_one_response(events)
    assert events[-1]["response"]["previous_response_id"] == first["id"]


# ---------------------------------------------------------------- 5. queueing


def test_back_to_back_creates_are_queued_not_interleaved(server: LabkitServer) -> None:
    """Two creates sent without waiting: the second starts only after the first's terminal event.

    The first asks for a long answer (hundreds of paced tokens), so if the connection ran
    them concurrently the second's events would land inside the first's.
    """
    with wire(server) as w:
        w.create(model=MODEL, input="Please answer in 400 tokens.", store=False)
        w.create(model=MODEL, input="Hi.", store=False)
        events = w.collect(answers=2)
    first_end = next(i for i, e in enumerate(events) if e["type"] in TERMINAL)
    first, second = events[: first_end + 1], events[first_end + 1 :]
    assert_one_response(first)
    assert_one_response(second)
    assert first[-1]["type"] == second[-1]["type"] == "response.completed"
    assert first[0]["response"]["id"] != second[0]["response"]["id"]
    assert first[-1]["response"]["usage"]["output_tokens"] >= 300
    assert sum(e["type"] == "response.output_text.delta" for e in first) > 1, "the first streamed in pieces"


def test_a_queued_invalid_create_is_answered_in_its_turn(server: LabkitServer) -> None:
    with wire(server) as w:
        w.create(model=MODEL, input="Please answer in 200 tokens.", store=False)
        w.create(model="labkit-no-such-model", input="Hi.", store=False)
        w.create(model=MODEL, input="Hi.", store=False)
        events = w.collect(answers=3)
    answers = [i for i, e in enumerate(events) if e["type"] in TERMINAL or e["type"] == "error"]
    assert [events[i]["type"] for i in answers] == ["response.completed", "error", "response.completed"]
    assert answers[1] == answers[0] + 1, "the error comes right after the first response, before the third"
    assert_error(events[answers[1]], "model_not_found", "model")
    assert_one_response(events[: answers[0] + 1])
    assert_one_response(events[answers[1] + 1 :])


# ---------------------------------------------------------------- 6. eviction


@pytest.mark.parametrize(
    ("bad", "code", "param"),
    [
        pytest.param({"model": "labkit-no-such-model"}, "model_not_found", "model", id="unknown-model"),
        pytest.param({"temperature": "hot"}, "invalid_type", "temperature", id="bad-type"),
    ],
)
def test_a_failed_turn_evicts_the_response_it_referenced(
    server: LabkitServer, bad: dict[str, Any], code: str, param: str
) -> None:
    with wire(server) as w:
        a = w.done(model=MODEL, input="Hello.", store=False)

        # A failure that does not reference the cached response leaves it in place.
        unrelated = w.turn(**{"model": MODEL, "input": "x", "store": False, **bad})
        assert_error(unrelated, code, param)
        b = w.done(model=MODEL, input="Go on.", previous_response_id=a["id"], store=False)
        assert traces(server, b["id"])["hydration"]["detail"]["source"] == "connection_cache"

        # A failure that references it evicts it: store=false has nothing to fall back on.
        failed = w.turn(
            **{"model": MODEL, "input": "x", "previous_response_id": b["id"], "store": False, **bad}
        )
        assert_error(failed, code, param)
        gone = w.turn(model=MODEL, input="Go on.", previous_response_id=b["id"], store=False)
        assert_error(gone, "previous_response_not_found", "previous_response_id")
        assert b["id"] in gone["error"]["message"]

        w.done(model=MODEL, input="Start over.", store=False)


def test_only_the_most_recent_response_is_cached(server: LabkitServer) -> None:
    """Branching from an older response misses the cache: store=false fails, store=true hydrates."""
    with wire(server) as w:
        a = w.done(model=MODEL, input="Hello.", store=False)
        w.done(model=MODEL, input="Go on.", previous_response_id=a["id"], store=False)
        branch = w.turn(model=MODEL, input="Or else?", previous_response_id=a["id"], store=False)
        assert_error(branch, "previous_response_not_found", "previous_response_id")

        s1 = w.done(model=MODEL, input="Hello.", store=True)
        w.done(model=MODEL, input="Go on.", previous_response_id=s1["id"], store=True)
        s_branch = w.done(model=MODEL, input="Or else?", previous_response_id=s1["id"], store=True)
    trace = traces(server, s_branch["id"])
    assert trace["hydration"]["detail"]["source"] == "store"
    assert trace["hydration"]["items"] == 2


# ---------------------------------------------------------------- 3. (raw) unknown previous response


def test_unknown_previous_response_error_shape(server: LabkitServer) -> None:
    with wire(server) as w:
        answer = w.turn(model=MODEL, input="Hi.", previous_response_id="resp_nope", store=False)
        assert answer == {
            "type": "error",
            "status": 400,
            "error": {
                "type": "invalid_request_error",
                "code": "previous_response_not_found",
                "param": "previous_response_id",
                "message": "Previous response with id 'resp_nope' not found.",
            },
        }
        w.done(model=MODEL, input="Hi.", store=False)


# ---------------------------------------------------------------- 8. errors never close the socket


def create_frame(**body: Any) -> str:
    return json.dumps({"type": "response.create", **body})


BAD_FRAMES = [
    pytest.param("this is not json", "invalid_json", None, id="invalid-json"),
    pytest.param("", "invalid_json", None, id="empty-frame"),
    pytest.param("[1, 2, 3]", "invalid_value", "type", id="not-an-object"),
    pytest.param(json.dumps({"model": MODEL, "input": "hi"}), "invalid_value", "type", id="no-type"),
    pytest.param(json.dumps({"type": 7}), "invalid_value", "type", id="non-string-type"),
    pytest.param(json.dumps({"type": "response.cancel"}), "unknown_event", "type", id="unknown-type"),
    pytest.param(create_frame(input="hi"), "missing_required_parameter", "model", id="no-model"),
    pytest.param(create_frame(model=5, input="hi"), "invalid_type", "model", id="model-not-string"),
    pytest.param(create_frame(model=MODEL, input=5), "invalid_type", "input", id="input-number"),
    pytest.param(
        create_frame(model=MODEL, temperature="hot"), "invalid_type", "temperature", id="temperature"
    ),
    pytest.param(create_frame(model=MODEL, tools="read_file"), "invalid_type", "tools", id="tools-string"),
    pytest.param(create_frame(model=MODEL, store="maybe"), "invalid_type", "store", id="store-string"),
    pytest.param(
        create_frame(model=MODEL, max_output_tokens=3), "invalid_value", "max_output_tokens", id="max-tokens"
    ),
    pytest.param(
        create_frame(model=MODEL, input=[{"type": "message", "role": "robot", "content": "x"}]),
        "invalid_value",
        "input[0].role",
        id="bad-role",
    ),
    pytest.param(
        create_frame(model=MODEL, input=[{"type": "function_call_output", "output": "x"}]),
        "missing_required_parameter",
        "input[0].call_id",
        id="output-without-call-id",
    ),
    pytest.param(
        create_frame(model=MODEL, input="hi", background=True),
        "unsupported_value",
        "background",
        id="background",
    ),
]


@pytest.mark.parametrize(("frame", "code", "param"), BAD_FRAMES)
def test_a_bad_frame_gets_an_error_and_the_socket_keeps_serving(
    server: LabkitServer, frame: str, code: str, param: str | None
) -> None:
    with wire(server) as w:
        w.send(frame)
        assert_error(w.recv(), code, param)
        # The next request is served normally; unknown fields are ignored, not fatal.
        w.done(model=MODEL, input="Still there?", store=False, labkit_unknown_field={"x": 1})


def test_a_binary_frame_that_is_not_utf8_gets_an_error(server: LabkitServer) -> None:
    with wire(server) as w:
        w.ws.send(b"\xff\xfe\x00")
        assert_error(w.recv(), "invalid_json")
        w.done(model=MODEL, input="Hi.", store=False)


def test_many_errors_in_a_row_then_a_chain(server: LabkitServer) -> None:
    with wire(server) as w:
        head = w.done(model=MODEL, input="Hi.", store=False)
        for frame in (
            "{",
            "null",
            json.dumps({"type": "session.update"}),
            create_frame(model=MODEL, top_p=7),
        ):
            w.send(frame)
            assert w.recv()["type"] == "error"
        # Frame-level errors do not touch the connection cache.
        nxt = w.done(model=MODEL, input="Go on.", previous_response_id=head["id"], store=False)
        assert traces(server, nxt["id"])["hydration"]["detail"]["source"] == "connection_cache"


# ---------------------------------------------------------------- 10. lanes


def test_two_lanes_run_concurrently_and_tag_their_events(server: LabkitServer) -> None:
    """Lane b's response starts before lane a's long response ends: lanes do not queue on each other."""
    with wire(server) as w:
        w.create(model=MODEL, input="Please answer in 400 tokens.", store=False, stream_id="a")
        w.create(model=MODEL, input="Hi.", store=False, stream_id="b")
        events = w.collect(answers=2)
    lanes = {lane: [e for e in events if e.get("stream_id") == lane] for lane in ("a", "b")}
    assert len(lanes["a"]) + len(lanes["b"]) == len(events), "every event of a named lane carries stream_id"
    for lane_events in lanes.values():
        assert_one_response(lane_events)
        assert lane_events[-1]["type"] == "response.completed"
    a_done = events.index(lanes["a"][-1])
    b_created = events.index(lanes["b"][0])
    assert b_created < a_done


def test_a_create_forks_from_the_response_of_another_lane(server: LabkitServer) -> None:
    """``previous_response_id`` may name any lane's latest response: the new one runs on its own
    lane, served from the connection cache (only its new item rendered). A failed fork keeps the
    response it named; a failed continuation on the response's own lane evicts it."""
    go_on = {"model": MODEL, "input": "Go on.", "store": False}
    orphan = [{"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}]
    with wire(server) as w:
        a = w.done(model=MODEL, input="On lane a.", store=False, stream_id="a")
        w.done(model=MODEL, input="On lane b.", store=False, stream_id="b")

        fork = w.turn(previous_response_id=a["id"], stream_id="b", **go_on)
        assert fork["type"] == "response.completed" and fork["stream_id"] == "b"
        assert fork["response"]["previous_response_id"] == a["id"]
        from_default = w.done(previous_response_id=a["id"], **go_on)  # the default lane forks too

        # A fork that fails on lane c names a, which lives on lane a: a stays.
        failed_fork = w.turn(**{**go_on, "input": orphan}, previous_response_id=a["id"], stream_id="c")
        assert_error(failed_fork, "invalid_value", "input[0].call_id")
        assert failed_fork["stream_id"] == "c", "a lane's error is tagged with its lane"
        a2 = w.done(previous_response_id=a["id"], stream_id="a", **go_on)

        # A continuation that fails on a2's own lane evicts it.
        failed = w.turn(**{**go_on, "input": orphan}, previous_response_id=a2["id"], stream_id="a")
        assert_error(failed, "invalid_value", "input[0].call_id")
        gone = w.turn(previous_response_id=a2["id"], stream_id="b", **go_on)
        assert_error(gone, "previous_response_not_found", "previous_response_id")
        assert gone["stream_id"] == "b"
    for response in (fork["response"], from_default, a2):
        spans = traces(server, response["id"])
        assert spans["hydration"]["detail"]["source"] == "connection_cache"
        assert spans["render"]["items"] == 1, "only the new item is rendered"


@pytest.mark.parametrize(
    "stream_id",
    [
        pytest.param("bad id!", id="space-and-bang"),
        pytest.param("", id="empty"),
        pytest.param("x" * 257, id="too-long"),
        pytest.param("lane/1", id="slash"),
        pytest.param(5, id="not-a-string"),
    ],
)
def test_invalid_stream_id(server: LabkitServer, stream_id: Any) -> None:
    with wire(server) as w:
        w.create(model=MODEL, input="Hi.", store=False, stream_id=stream_id)
        assert_error(w.recv(), "invalid_stream_id", "stream_id")
        w.done(model=MODEL, input="Hi.", store=False, stream_id="A-z_0.9" + "x" * 249)


def test_at_most_32_named_lanes(server: LabkitServer) -> None:
    with wire(server) as w:
        for i in range(32):
            w.create(model=MODEL, input="Warm up.", store=False, generate=False, stream_id=f"lane-{i}")
        events = w.collect(answers=32)
        finished = {e["stream_id"] for e in events if e["type"] == "response.completed"}
        assert finished == {f"lane-{i}" for i in range(32)}

        w.create(model=MODEL, input="Hi.", store=False, stream_id="lane-32")
        refused = w.recv()
        assert_error(refused, "websocket_stream_limit_reached", "stream_id")
        assert refused["stream_id"] == "lane-32", "the refused lane is named, for a client that demultiplexes"

        # Existing lanes and the default lane keep working.
        reused = w.turn(model=MODEL, input="Hi.", store=False, stream_id="lane-0")
        assert reused["type"] == "response.completed" and reused["stream_id"] == "lane-0"
        w.done(model=MODEL, input="Hi.", store=False)


def test_at_most_16_responses_in_flight_per_connection(server: LabkitServer) -> None:
    """Read off the event stream: never more than 16 responses between created and terminal."""
    lanes = [f"busy-{i}" for i in range(20)]
    with wire(server) as w:
        for lane in lanes:
            w.create(model=MODEL, input="Please answer in 300 tokens.", store=False, stream_id=lane)
        events = w.collect(answers=len(lanes))
    open_now, most = set(), 0
    for event in events:
        if event["type"] == "response.created":
            open_now.add(event["stream_id"])
        elif event["type"] in TERMINAL:
            assert event["type"] == "response.completed"
            open_now.remove(event["stream_id"])
        most = max(most, len(open_now))
    assert 1 < most <= 16
    assert not open_now


def test_codex_shaped_warm_up_and_chain(server: LabkitServer) -> None:
    """What Codex sends: beta header, a store=false warm-up with extra fields and non-function tools."""
    tools = [
        READ_FILE_TOOL,
        {"type": "web_search", "external_web_access": False},
        {"type": "namespace", "name": "mcp__docs", "tools": [{"type": "function", "name": "lookup"}]},
    ]
    common = {
        "model": MODEL,
        "instructions": "You are Codex, a coding agent. Work carefully and verify your changes with tests.",
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"summary": "auto"},
        "prompt_cache_key": "0f8e6d2c-codex-session",
        "client_metadata": {"originator": "codex_cli_rs"},
    }
    developer = {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "cwd: /repo"}],
    }
    headers = {**auth_headers(), "openai-beta": "responses_websockets=2026-02-06"}
    with connect(server.ws_url, additional_headers=headers) as ws:
        w = Wire(ws)
        warm = w.done(input=[developer], generate=False, **common)
        assert warm["output"] == []
        user = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Fix the bug."}],
        }
        real = w.done(input=[user], previous_response_id=warm["id"], **common)
    assert [item["type"] for item in real["output"]] == ["function_call"]
    assert real["usage"]["input_tokens_details"]["cached_tokens"] > 0
    assert traces(server, real["id"])["hydration"]["detail"]["source"] == "connection_cache"


# ---------------------------------------------------------------- 9. connection lifetime


@pytest.fixture(scope="module")
def short_lived_server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--ws-lifetime", "1"]) as srv:
        yield srv


def test_connection_lifetime_limit_sends_an_error_then_closes(short_lived_server: LabkitServer) -> None:
    with wire(short_lived_server) as w:
        event = w.recv()  # nothing was asked: the only thing the server can send is the limit
        assert_error(event, "websocket_connection_limit_reached")
        with pytest.raises(ConnectionClosedOK):
            w.ws.recv(timeout=RECV_TIMEOUT)
        assert w.ws.close_code == 1000
    # The client reconnects: a new connection is served.
    with wire(short_lived_server) as w:
        w.create(model=MODEL, input="Hi.", store=False, generate=False)
        assert w.recv()["type"] == "response.created"


# ---------------------------------------------------------------- 11. auth on the upgrade


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--api-key", "sk-good", "--api-key", "sk-other"]) as srv:
        yield srv


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(auth_headers("sk-wrong"), id="wrong-key"),
        pytest.param({}, id="no-key"),
        pytest.param({"Authorization": "Basic sk-good"}, id="not-bearer"),
    ],
)
def test_upgrade_without_a_valid_key_is_refused(keyed_server: LabkitServer, headers: dict[str, str]) -> None:
    with pytest.raises(InvalidStatus) as refused, connect(keyed_server.ws_url, additional_headers=headers):
        pass
    # Refused before the handshake with an HTTP answer in the API's error shape (§3.1).
    assert refused.value.response.status_code == 401
    error = json.loads(refused.value.response.body)["error"]
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"


def test_upgrade_with_the_right_key_works_and_responses_stay_with_their_key(
    keyed_server: LabkitServer,
) -> None:
    with wire(keyed_server, "sk-good") as w:
        mine = w.done(model=MODEL, input="Hi.", store=True)
    with wire(keyed_server, "sk-other") as w:
        theirs = w.turn(model=MODEL, input="Go on.", previous_response_id=mine["id"], store=True)
        assert_error(theirs, "previous_response_not_found", "previous_response_id")
    with wire(keyed_server, "sk-good") as w:
        w.done(model=MODEL, input="Go on.", previous_response_id=mine["id"], store=True)


def test_closing_mid_response_does_not_hurt_the_server(server: LabkitServer) -> None:
    with wire(server) as w:
        w.create(model=MODEL, input="Please answer in 400 tokens.", store=False)
        assert w.recv()["type"] == "response.created"
    with wire(server) as w:
        w.done(model=MODEL, input="Hi.", store=False)
