"""A client that vanishes frees its engine slots within about a second, on every wire and design.

A learner's notebook that crashes mid-answer leaves its connections behind it: reset (its socket
closed with unread data, or with ``SO_LINGER`` 0), or closed with a FIN, which TCP cannot tell
from a client that only shut its side and reads on (``labkit.server.edge.half_close``). Here one
client fills every engine slot of a real ``labkit serve`` (the ``local`` profile: 8 slots) with
long answers and vanishes; another key's short answer is then served, and the one after it finds
every slot free (its ``queue`` span: nobody busy). The old server lost the slots of responses
cancelled while others waited (``EngineSlots``), and a JSON answer ran to its end for nobody.

The wait for the other key's answer is a bound on hanging, far above the second it takes and far
below the half minute the vanished client's answers would run; nothing is timed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from labkit.api.extensions import DESIGN_HEADER
from labkit.api.inject import BETA_HEADER, MULTI_AGENT_BETA
from labkit.client.launcher import LabkitServer
from labkit.server.stages.slots import EngineSlots
from tests.helpers import auth_headers, by_stage, port_of, server_spans, ws_connect

pytestmark = pytest.mark.slow  # servers of its own, filled with long answers

SLOTS = 8  # the local profile's engine.max_concurrent
LANES = 16  # a WebSocket's lanes, each asking for a long answer: twice the engine's slots
LONG = "Write 30000 tokens."  # half a minute at labkit-spark's 1,000 tokens/s
GONE_KEY, OTHER_KEY = "sk-vanishes", "sk-stays"
FREED_WITHIN_S = 10.0  # the other key's answer comes in this long at most (it takes about a second)
RECV_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local"]) as running:
        yield running


def vanish(sock: socket.socket, how: str) -> None:
    """The client is gone: ``reset`` (SO_LINGER 0) or ``close`` (a FIN, unless data is unread)."""
    if how == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def other_answer(server: LabkitServer) -> dict[str, Any]:
    """Another key's short answer, and the spans of the one after it."""
    body = {"model": "labkit-spark", "input": "Say hi.", "store": False}
    with httpx.Client(headers=auth_headers(OTHER_KEY), timeout=FREED_WITHIN_S) as http:
        first = http.post(f"{server.base_url}/responses", json=body)
        assert first.status_code == 200, first.text
        second = http.post(f"{server.base_url}/responses", json=body).json()
    return by_stage(server_spans(server.base_url, second["id"], OTHER_KEY))["queue"]["detail"]


# ---------------------------------------------------------------- the wires


def fill_over_websocket(server: LabkitServer, design: str, beta: bool) -> socket.socket:
    """A WebSocket with a long answer on each lane, which stops reading once they decode."""
    headers = {**auth_headers(GONE_KEY), DESIGN_HEADER: design}
    if beta:
        headers[BETA_HEADER] = MULTI_AGENT_BETA
    ws = ws_connect(server, **headers)
    for lane in range(LANES):
        create = {"type": "response.create", "model": "labkit-spark", "input": LONG, "store": False}
        ws.send(json.dumps({**create, "stream_id": f"lane-{lane}"}))
    decoding: set[str] = set()
    while len(decoding) < SLOTS:  # every slot holds one of its answers
        event = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        assert event["type"] != "error", event
        if event["type"] == "response.output_text.delta":
            decoding.add(event["stream_id"])
    return ws.socket


def fill_over_http(server: LabkitServer, design: str, stream: bool) -> list[socket.socket]:
    """A long answer on each of ``SLOTS`` raw connections (an SSE one read up to its first delta)."""
    body = json.dumps({"model": "labkit-spark", "input": LONG, "store": False, "stream": stream}).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: labkit\r\nAuthorization: Bearer {GONE_KEY}\r\n"
        f"{DESIGN_HEADER}: {design}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    socks = []
    for _ in range(SLOTS):
        sock = socket.create_connection(("127.0.0.1", port_of(server)), timeout=RECV_TIMEOUT_S)
        sock.sendall(head.encode() + body)
        socks.append(sock)
    if stream:
        for sock in socks:
            seen = b""
            while b"response.output_text.delta" not in seen:
                seen += sock.recv(65536)
    else:
        time.sleep(1.0)  # each has its slot (a JSON answer shows nothing until it is done)
    return socks


CASES = [
    pytest.param("websocket", "websocket", "reset", id="websocket-reset"),
    pytest.param("websocket", "websocket", "close", id="websocket-close"),
    pytest.param("websocket", "appended", "reset", id="appended-reset"),
    pytest.param("inject", "appended", "close", id="inject-beta-close"),
    pytest.param("json", "naive", "reset", id="json-naive-reset"),
    pytest.param("json", "sprint", "close", id="json-sprint-fin"),
    pytest.param("sse", "sprint", "close", id="sse-sprint-close"),
]


@pytest.mark.parametrize(("wire", "design", "how"), CASES)
def test_a_vanished_clients_slots_are_free_for_the_room(
    server: LabkitServer, wire: str, design: str, how: str
) -> None:
    if wire in ("websocket", "inject"):
        socks = [fill_over_websocket(server, design, beta=wire == "inject")]
    else:
        socks = fill_over_http(server, design, stream=wire == "sse")
    for sock in socks:
        vanish(sock, how)
    queue = other_answer(server)  # the old server: a ReadTimeout, every slot still held
    assert queue["busy"] == 0 and queue["waited"] is False, queue


def test_a_server_stopped_after_a_client_vanished_has_nothing_left_to_cancel() -> None:
    with LabkitServer(args=["--profile", "local"]) as running:
        vanish(fill_over_websocket(running, "websocket", beta=False), "reset")
        other_answer(running)
        running.stop()
        log = "\n".join(running.log)
    assert "timeout graceful shutdown exceeded" not in log, log[-2000:]


# ---------------------------------------------------------------- the slots themselves, in process


def test_a_waiter_cancelled_with_the_holder_leaves_every_slot_free() -> None:
    """A connection that ends cancels its responses in order: one holding a slot, one waiting for
    it. The holder's release must not hand its slot to the waiter being cancelled."""

    async def scenario() -> int:
        slots = EngineSlots(capacity=1)

        async def respond() -> None:
            await slots.acquire(GONE_KEY)
            try:
                await asyncio.sleep(60)
            finally:
                slots.release(GONE_KEY)

        tasks = [asyncio.create_task(respond()) for _ in range(2)]
        for _ in range(5):
            await asyncio.sleep(0)  # the first holds the slot, the second waits
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return slots.busy

    assert asyncio.run(scenario()) == 0  # the old slots: 1, lost for good
