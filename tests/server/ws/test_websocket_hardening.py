"""A room of buggy clients over WebSocket mode: every bad frame gets the nested error event and the
socket stays open, with every lane still serving; a frame the server cannot use at all closes the
socket cleanly with the standard code (docs/protocol.md §3.6, "Limits").

Raw ``websockets`` clients, frame by frame; ordering is read off the frames, never the clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from labkit.client.launcher import LabkitServer
from tests.helpers import (
    ERROR_KEYS,
    KEY_A,
    KEY_B,
    MAX_BODY,
    RECV_TIMEOUT,
    TERMINAL,
    assert_error_event,
    bearer,
    recv,
)

pytestmark = pytest.mark.slow  # hardening

MODEL = "labkit-spark"
SLOW = "labkit-classic"  # 65 tokens/s: a response that is surely still running a moment later


@contextmanager
def socket(server: LabkitServer, key: str = KEY_A) -> Iterator[ClientConnection]:
    with connect(server.ws_url, additional_headers=bearer(key), max_size=None) as ws:
        yield ws


def create(ws: ClientConnection, **body: Any) -> None:
    ws.send(json.dumps({"type": "response.create", **body}))


def answer(ws: ClientConnection) -> dict[str, Any]:
    """Events up to the first terminal or error event; that event."""
    while True:
        event = recv(ws)
        if event["type"] in TERMINAL or event["type"] == "error":
            return event


def still_serving(ws: ClientConnection, stream_id: str | None = None) -> None:
    """The connection's default lane (or a named one) answers a create with a whole response."""
    extra = {"stream_id": stream_id} if stream_id else {}
    create(ws, model=MODEL, input="Still there?", store=False, **extra)
    event = answer(ws)
    assert event["type"] == "response.completed", event


# ---------------------------------------------------------------- frames the server can answer

BAD_FRAMES = [
    pytest.param(
        '{"type": "response.create", "model": "labkit-spark", "input": "\\ud800"}', "input", id="input"
    ),
    pytest.param('{"type": "response.create", "model": "\\ud800", "input": "hi"}', "model", id="model"),
    pytest.param('{"type": "\\ud800"}', "type", id="type"),
    pytest.param(
        '{"type": "response.create", "stream_id": "\\udc00", "model": "m"}', "stream_id", id="stream-id"
    ),
    pytest.param(
        '{"type": "response.create", "model": "labkit-spark", "input": "hi", "temperature": NaN}', None
    ),
    pytest.param(
        '{"type": "response.create", "model": "labkit-spark", "input": Infinity}', None, id="infinity"
    ),
    pytest.param('{"type": "response.create", "model": "labkit-spark", "x": 1e999}', None, id="overflow"),
    pytest.param("[" * 10_000 + "]" * 10_000, None, id="deep-10000"),
    pytest.param('{"type": "response.create", "metadata": ' + "{}" * 1 + "}", None, id="no-model"),
    pytest.param('{"type": "response.create", "n": ' + "1" * 5000 + "}", None, id="digits"),
    pytest.param(
        '{"type": "response.create", "model": "labkit-spark", "input": "hi", "tools": '
        '[{"type": "function", "name": "f", "parameters": {"type": "object", "required": 1}}]}',
        "tools[0].parameters.required",
        id="bad-schema",
    ),
    pytest.param(
        '{"type": "response.create", "model": "labkit-spark", "input": "hi", '
        '"metadata": {"labkit_scenario": "synthetic:turns=' + "9" * 500 + '"}}',
        "metadata.labkit_scenario",
        id="scenario",
    ),
]


@pytest.mark.parametrize(("frame", "param"), BAD_FRAMES)
@pytest.mark.parametrize("lane", [None, "side"])
def test_a_bad_frame_gets_an_error_event_and_every_lane_keeps_serving(
    room: LabkitServer, frame: str, param: str | None, lane: str | None
) -> None:
    if lane is not None and frame.startswith('{"type": "response.create"'):
        frame = '{"stream_id": "side", ' + frame[1:]
    with socket(room) as ws:
        ws.send(frame)
        error = assert_error_event(answer(ws))
        if param is not None:
            assert error["param"] == param
        still_serving(ws)
        still_serving(ws, "side")


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"\xff\xfe{}", id="not-utf8"),
        pytest.param(
            b'{"type": "response.create", "model": "labkit-spark", "input": "\xed\xa0\x80"}', id="cesu"
        ),
        pytest.param(b'{"type": "response.create", "model": "labkit-spark", "input": NaN}', id="nan"),
    ],
)
def test_a_bad_binary_frame_gets_an_error_event(room: LabkitServer, raw: bytes) -> None:
    with socket(room) as ws:
        ws.send(raw)
        assert_error_event(answer(ws))
        still_serving(ws)


def test_many_bad_frames_in_a_row_never_stick_the_default_lane(room: LabkitServer) -> None:
    """The old failure: an error with an unencodable message killed the lane's worker for good."""
    with socket(room) as ws:
        for i in range(30):  # one at a time: each waits on the lane, within --max-queued-creates
            model = "\\ud800" if i % 3 == 0 else "no-such-model-\\u00e9"
            ws.send('{"type": "response.create", "input": "hi", "model": "' + model + '"}')
            assert_error_event(answer(ws))
        still_serving(ws)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_is_never_emitted(room: LabkitServer, number: str) -> None:
    """A number JSON cannot carry, sent in ``reasoning``, which every event of a response echoes
    as it was sent: accepted, it would be on the wire from ``response.created`` on. The frame is
    refused instead, before any event, and the lane serves on (``recv`` parses every frame strictly)."""
    body = {"type": "response.create", "model": MODEL, "input": "hi", "reasoning": {"x": "NUMBER"}}
    frame = json.dumps(body).replace('"NUMBER"', number)
    with socket(room) as ws:
        ws.send(frame)
        error = assert_error_event(recv(ws))  # the first event: nothing of a response came before it
        assert error["code"] == "invalid_json" and number in error["message"], error
        still_serving(ws)


# ---------------------------------------------------------------- frames it cannot use


def test_a_frame_over_the_limit_closes_with_1009(room: LabkitServer) -> None:
    with socket(room) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "x" * MAX_BODY}))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=RECV_TIMEOUT)
        assert ws.close_code == 1009
    with socket(room) as ws:  # the server itself is unharmed
        still_serving(ws)


def test_a_text_frame_that_is_not_utf8_closes_with_1007(room: LabkitServer) -> None:
    with socket(room) as ws:
        ws.send(b'{"type": "\xff"}', text=True)  # bytes sent as a text frame, unchecked
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=RECV_TIMEOUT)
        assert ws.close_code == 1007
    with socket(room) as ws:
        still_serving(ws)


# ---------------------------------------------------------------- the queue of one connection


def test_queued_creates_past_the_cap_are_refused_and_the_rest_run(room: LabkitServer) -> None:
    """--max-queued-creates 2: one running, two waiting, the next two refused at once."""
    with socket(room) as ws:
        create(ws, model=SLOW, input="Write 60 tokens.", store=False)
        assert recv(ws)["type"] == "response.created"  # running: the next creates wait behind it
        for i in range(4):
            create(ws, model=MODEL, input=f"warm {i}", store=False, generate=False)
        refused, finished = [], []
        while len(finished) < 3:
            event = recv(ws)
            if event["type"] == "error":
                refused.append(assert_error_event(event, 429))
            elif event["type"] in TERMINAL:
                finished.append(event)
        assert [(e["type"], e["code"]) for e in refused] == [("rate_limit_error", "websocket_queue_full")] * 2
        assert [len(e["response"]["output"]) for e in finished] == [1, 0, 0]
        still_serving(ws)


# ---------------------------------------------------------------- the upgrade


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-key"),
        pytest.param(bearer("sk-wrong"), id="wrong-key"),
        pytest.param({"Authorization": "Bearer sk-room-\u00e9"}, id="non-ascii"),
    ],
)
def test_a_refused_upgrade_is_a_401_in_the_error_shape(room: LabkitServer, headers: dict[str, str]) -> None:
    with pytest.raises(InvalidStatus) as refused, connect(room.ws_url, additional_headers=headers):
        pass
    reply = refused.value.response
    assert reply.status_code == 401
    error = json.loads(reply.body)["error"]
    assert set(error) == ERROR_KEYS and error["type"] == "authentication_error"


def test_open_connections_per_key_are_capped(one_at_a_time: LabkitServer) -> None:
    with socket(one_at_a_time, KEY_A) as first:
        with pytest.raises(InvalidStatus) as refused, socket(one_at_a_time, KEY_A):
            pass
        assert refused.value.response.status_code == 429
        assert json.loads(refused.value.response.body)["error"]["type"] == "rate_limit_error"
        with socket(one_at_a_time, KEY_B) as other:  # another key is not held back
            still_serving(other)
        still_serving(first)


@contextmanager
def socket_when_free(server: LabkitServer, key: str) -> Iterator[ClientConnection]:
    """A connection for a key whose previous one the server may not have let go of yet."""
    for _ in range(100):
        try:
            ws = connect(server.ws_url, additional_headers=bearer(key))
        except InvalidStatus as refused:
            assert refused.response.status_code == 429
            time.sleep(0.05)
            continue
        with ws:
            yield ws
        return
    raise AssertionError("the key's connection was never released")


def test_responses_in_flight_per_key_are_capped_across_lanes(one_at_a_time: LabkitServer) -> None:
    with socket_when_free(one_at_a_time, KEY_A) as ws:
        create(ws, model=MODEL, input="hi", store=False, stream_id="fast")
        first = answer(ws)["response"]  # the "fast" lane now caches it (store: false)
        create(ws, model=SLOW, input="Write 60 tokens.", store=False, stream_id="slow")
        assert recv(ws)["type"] == "response.created"
        follow_up = {"model": MODEL, "input": "more", "store": False, "previous_response_id": first["id"]}
        create(ws, stream_id="fast", **follow_up)
        events = []
        while not events or events[-1]["type"] not in TERMINAL:  # until the slow one finishes
            events.append(recv(ws))
        [error] = [e for e in events if e["type"] == "error"]
        assert error["stream_id"] == "fast"
        refusal = assert_error_event(error, 429)
        assert refusal["type"] == "rate_limit_error"
        # The API's rate-limit headers: the cap, and nothing of it left.
        limit = {"x-ratelimit-limit-requests": "1", "x-ratelimit-remaining-requests": "0"}
        assert refusal["headers"] == limit
        assert events[-1]["stream_id"] == "slow"
        # Refused before it started: the lane's cache still holds what the retry chains from.
        create(ws, stream_id="fast", **follow_up)
        assert answer(ws)["type"] == "response.completed"
