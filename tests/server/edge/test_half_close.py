"""A client that shut only its sending side still gets its whole answer, probe and all
(``labkit.server.edge.half_close``).

The server probes a client that sent a FIN and whose answer is still to come half a second
later: one that closed its socket answers with a reset and is dropped (``test_slots_vanished.py``,
``test_auth_vanished.py``); one that only shut its side (``shutdown(SHUT_WR)``) takes the probe
and reads on. Here that second kind, on a real ``labkit serve`` with raw sockets, its bytes read
by h11's client side as an HTTP library would: a JSON answer preceded by ``102 Processing``, an
SSE stream with one comment line among its events, each answer whole. Nothing is timed.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import h11
import pytest

from labkit.client.launcher import LabkitServer
from labkit.server.edge.half_close import PROBE_COMMENT
from tests.helpers import port_of

pytestmark = pytest.mark.slow  # a server of its own

SLOW_ANSWER = "Write 2000 tokens."  # two seconds at labkit-spark's pace: the probe comes first
RECV_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local"]) as running:
        yield running


def half_closed_answer(server: LabkitServer, stream: bool) -> list[Any]:
    """A create sent, the client's side shut, everything the server sends read to the end, as h11
    events (an HTTP client's reading of it)."""
    body = json.dumps({"model": "labkit-spark", "input": SLOW_ANSWER, "store": False, "stream": stream})
    client = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="POST",
        target="/v1/responses",
        headers=[
            ("host", "labkit"),
            ("authorization", "Bearer sk-half-closed"),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
        ],
    )
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=RECV_TIMEOUT_S) as sock:
        sock.sendall(
            client.send(request) + client.send(h11.Data(data=body.encode())) + client.send(h11.EndOfMessage())
        )
        sock.shutdown(socket.SHUT_WR)  # "that is all": it reads on
        while data := sock.recv(65536):
            client.receive_data(data)
    client.receive_data(b"")
    events = []
    while (event := client.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
        events.append(event)
        if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    return events


def test_a_half_closed_client_of_a_slow_json_answer_gets_it_after_a_102(server: LabkitServer) -> None:
    events = half_closed_answer(server, stream=False)
    heads = [e.status_code for e in events if isinstance(e, h11.InformationalResponse | h11.Response)]
    assert heads == [102, 200], heads
    body = b"".join(bytes(e.data) for e in events if isinstance(e, h11.Data))
    assert json.loads(body)["status"] == "completed"


def test_a_half_closed_client_of_a_stream_gets_every_event_and_one_comment(server: LabkitServer) -> None:
    events = half_closed_answer(server, stream=True)
    body = b"".join(bytes(e.data) for e in events if isinstance(e, h11.Data))
    assert body.count(PROBE_COMMENT) == 1
    frames = [f for f in body.split(b"\n\n") if f.startswith(b"event: ")]
    assert frames[-1].startswith(b"event: response.completed")
