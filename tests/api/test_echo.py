"""A refusal costs a bounded number of bytes, never the connection, and parses as the SDK's own type.

The old server returned a refused input whole: a 1.2 MB ``response.steer`` (under the 2 MiB frame
limit) to an unknown response came back in a ``response.steer.failed`` past the 1 MiB a client
may leave unread, and the connection was cut (1008), the response running on it with it; the same
for a ``response.inject`` on the beta's wire, and for an error quoting a 1.5 MB event type. It
also returned input the SDK's ``ResponseSteerFailedEvent`` does not take (an assistant's message,
a message without its ``type``). Now a refusal returns the input only as the SDK's event type
takes it and within ``ServerLimits.max_echo_bytes``, and clips what its message quotes
(``labkit.api.echo``).

A real ``labkit serve`` on loopback, raw WebSocket frames, the SDK's types validating strictly.
Each client lets the refusal wait unread a moment, as a client busy elsewhere would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from openai._models import validate_type
from openai.types.beta.beta_responses_server_event import BetaResponsesServerEvent
from openai.types.responses import ResponseSteerFailedEvent
from websockets.sync.client import ClientConnection

from labkit.api.echo import MAX_MESSAGE_CHARS
from labkit.api.extensions import DESIGN_HEADER
from labkit.api.inject import BETA_HEADER, MULTI_AGENT_BETA
from labkit.client.launcher import LabkitServer
from labkit.limits import ServerLimits
from tests.helpers import ws_connect

pytestmark = pytest.mark.slow  # a server of its own

BIG = 1_200_000  # characters of input: under the frame limit, over what a client may leave unread
ECHO = ServerLimits().max_echo_bytes
REFUSAL_BOUND = ECHO + 2 * MAX_MESSAGE_CHARS + 1024  # the input returned, the message, the rest
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
RECV_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local"]) as running:
        yield running


def running_response(ws: ClientConnection) -> str:
    """Start an answer of a few seconds and return its id once it is created."""
    create = {
        "type": "response.create",
        "model": "labkit-spark",
        "input": "Write 3000 tokens.",
        "store": False,
    }
    ws.send(json.dumps(create))
    while True:
        event = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        if event["type"] == "response.created":
            return event["response"]["id"]


def refusal_and_end(ws: ClientConnection, response_id: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The refusal (its frame as sent, and parsed), then the running response's terminal event: a
    cut connection raises ``ConnectionClosed`` here instead."""
    time.sleep(0.5)  # the refusal waits unread, as behind a busy client's other work
    refusal: tuple[str, dict[str, Any]] | None = None
    while True:
        text = ws.recv(timeout=RECV_TIMEOUT_S)
        event = json.loads(text)
        if event["type"] in ("error", "response.steer.failed", "response.inject.failed"):
            refusal = (text, event)
        if event["type"] in TERMINAL and event["response"]["id"] == response_id:
            assert refusal is not None, "no refusal came before the response ended"
            return refusal[0], refusal[1], event


def test_an_oversized_steer_is_refused_in_a_few_bytes_and_cuts_nothing(server: LabkitServer) -> None:
    with ws_connect(server) as ws:
        target = running_response(ws)
        steer = {"type": "response.steer", "previous_response_id": "resp_elsewhere", "input": "x" * BIG}
        ws.send(json.dumps(steer))
        text, failed, end = refusal_and_end(ws, target)
    assert len(text) <= REFUSAL_BOUND, len(text)
    parsed = validate_type(type_=ResponseSteerFailedEvent, value=failed)
    assert parsed.error.code == "response_not_found" and parsed.steer.input == ""
    assert "not returned" in parsed.error.message
    assert end["type"] == "response.completed", "the response running on the socket went on"


def test_an_oversized_inject_is_refused_in_a_few_bytes_and_cuts_nothing(server: LabkitServer) -> None:
    beta = {BETA_HEADER: MULTI_AGENT_BETA, DESIGN_HEADER: "appended"}
    with ws_connect(server, **beta) as ws:
        target = running_response(ws)
        message = {"type": "message", "role": "user", "content": "y" * BIG}
        ws.send(json.dumps({"type": "response.inject", "response_id": "resp_elsewhere", "input": [message]}))
        text, failed, end = refusal_and_end(ws, target)
    assert len(text) <= REFUSAL_BOUND, len(text)
    parsed = validate_type(type_=BetaResponsesServerEvent, value=failed)  # type: ignore[arg-type]
    assert parsed.type == "response.inject.failed" and failed["input"] == []
    assert "not returned" in failed["error"]["message"]
    assert end["type"] == "response.completed"


def test_an_error_quoting_an_oversized_value_is_clipped_and_cuts_nothing(server: LabkitServer) -> None:
    with ws_connect(server) as ws:
        target = running_response(ws)
        ws.send(json.dumps({"type": "t" * BIG}))  # "Unsupported event type '…'"
        text, error, end = refusal_and_end(ws, target)
    assert len(text) <= REFUSAL_BOUND and error["error"]["code"] == "unknown_event"
    assert end["type"] == "response.completed"


REFUSED_INPUTS = [
    pytest.param([{"type": "message", "role": "assistant", "content": "I will."}], "", id="assistant"),
    pytest.param([{"type": "function_call_output", "call_id": "c", "output": "x"}], "", id="tool-output"),
    pytest.param(7, "", id="not-input"),
    pytest.param(
        [{"role": "user", "content": "Use tabs."}],  # no "type": steering input, returned with its type
        [{"type": "message", "role": "user", "content": "Use tabs."}],
        id="message-without-type",
    ),
    pytest.param("Use tabs.", "Use tabs.", id="text"),
]


@pytest.mark.parametrize(("sent", "returned"), REFUSED_INPUTS)
def test_every_steer_refusal_parses_strictly_as_the_sdks_event(
    server: LabkitServer, sent: Any, returned: Any
) -> None:
    with ws_connect(server) as ws:
        ws.send(
            json.dumps({"type": "response.steer", "previous_response_id": "resp_elsewhere", "input": sent})
        )
        failed = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
    assert failed["type"] == "response.steer.failed", failed
    parsed = validate_type(type_=ResponseSteerFailedEvent, value=failed)  # the old server: a ValidationError
    assert failed["steer"]["input"] == returned and parsed.steer.previous_response_id == "resp_elsewhere"
