"""What a WebSocket client's frames make the server hold is bounded in bytes, per connection and
per key (``labkit.server.wscore.held_bytes``), for every kind of frame.

The old server counted injects (16 a response) and steers (8 a response) but not their bytes: 16
lanes x 16 injects of 1.9 MB were all accepted on one connection, and the server grew by half a
gigabyte; and a key could open any number of such connections. Now every frame not used yet
counts toward the connection's bound (16 MiB by default) and its key's
(``--max-held-bytes-per-key``); past either, the frame is refused with an error in the API's
shape, and nothing else on the socket changes.

A real ``labkit serve`` on loopback and raw WebSocket frames on the multi-agent beta's wire
(injects held by rollouts that are still decoding, so none is taken): how many frames are held,
how the rest are refused, and that a closed connection's bytes are its key's again. What the
floods cost the server in memory depends on the machine's load, and is measured by
``benchmarks/held_bytes.py``. When each kind of frame stops being held is checked on the
I/O-free ``Connection``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from websockets.sync.client import ClientConnection

from labkit.client.launcher import LabkitServer
from labkit.designs import compose
from labkit.server.wscore.connection import Connection
from labkit.server.wscore.connection_jobs import Failed, Finished, Send, Start
from labkit.server.wscore.held_bytes import HeldBytes
from tests.helpers import auth_headers, load_script, ws_connect

pytestmark = pytest.mark.slow  # servers of its own, and half a gigabyte of frames

LANES, INJECTS = 16, 16  # a connection's responses in flight, and injects each may be handed
INJECT_CHARS = 1_900_000  # an inject's text: under the 2 MiB frame limit
KEY_BOUND = 3 * 1024 * 1024  # --max-held-bytes-per-key for the key's own test
# The wire's helpers are the benchmark's, which measures the memory this test leaves to it.
BENCH = load_script("benchmarks/held_bytes.py")
RELEASED_WITHIN_S = 5.0  # a closed connection's bytes are the key's again within this, at most


def flood(ws: ClientConnection, ids: list[str]) -> list[dict[str, Any]]:
    """Hand every rollout ``INJECTS`` injects of ``INJECT_CHARS``; the refusals, once all were handled."""
    return BENCH.flood(ws, ids, INJECTS, INJECT_CHARS)[1]  # the connection is still open: it answers


def test_one_connections_injects_are_held_within_its_bound() -> None:
    with (
        LabkitServer(args=["--profile", "local"]) as server,
        ws_connect(server, max_queue=None, **BENCH.BETA) as ws,  # the rollouts' deltas, read while it floods
    ):
        ids = BENCH.rollouts(ws, LANES)
        refusals = flood(ws, ids)
        refused_again = flood(ws, ids)
    held = LANES * INJECTS - len(refusals)
    assert held * INJECT_CHARS <= 16 * 1024 * 1024, held  # the old server: all 256 held
    assert {(e["status"], e["error"]["code"]) for e in refusals} == {(429, "websocket_queue_full")}
    assert "this connection" in refusals[0]["error"]["message"]
    assert len(refused_again) == LANES * INJECTS  # the bound is full: nothing more is held


@pytest.fixture(scope="module")
def bounded_key() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local", "--max-held-bytes-per-key", str(KEY_BOUND)]) as running:
        yield running


def test_a_keys_connections_hold_within_its_bound_together(bounded_key: LabkitServer) -> None:
    key = auth_headers("sk-two-sockets")
    one = ws_connect(bounded_key, **key, **BENCH.BETA)
    with ws_connect(bounded_key, **key, **BENCH.BETA) as two:
        [first], [second] = BENCH.rollouts(one, 1), BENCH.rollouts(two, 1)
        for _ in range(2):
            one.send(BENCH.inject(first, 1_000_000))  # 2 MB held by the first connection
        assert BENCH.answer_to_marker(one) == []
        two.send(BENCH.inject(second, 1_500_000))  # within its connection's bound, past its key's
        [refused] = BENCH.answer_to_marker(two)
        assert refused["error"]["code"] == "websocket_queue_full"
        assert "this API key" in refused["error"]["message"]
        one.close()  # what the first connection held is given back to the key as it ends
        deadline = time.monotonic() + RELEASED_WITHIN_S
        while time.monotonic() < deadline:
            two.send(BENCH.inject(second, 1_500_000))
            if BENCH.answer_to_marker(two) == []:
                return
            time.sleep(0.1)
        raise AssertionError("what the closed connection held was not given back")


# ---------------------------------------------------------------- the accounting, on the I/O-free Connection


def conversation(response_id: str) -> Any:
    """What a finished response leaves in the cache: only its Response's id matters here."""
    return SimpleNamespace(response={"id": response_id})


def create_frame(**fields: Any) -> str:
    return json.dumps({"type": "response.create", "model": "labkit-spark", "input": "hi", **fields})


def test_steering_input_is_held_until_the_response_that_carries_it_is_created() -> None:
    conn = Connection(compose("websocket"))
    [start] = conn.receive(create_frame())
    assert isinstance(start, Start) and conn.held.held == 0  # a create is held until it starts
    conn.created(start.job, "resp_1")
    conn.steer({"type": "response.steer", "previous_response_id": "resp_1", "input": "Stop."}, size=500)
    assert conn.held.held == 500
    after = conn.finished(start.job, Finished(conversation("resp_1"), "incomplete"))
    [successor] = [a.job for a in after if isinstance(a, Start)]
    assert conn.held.held == 500  # carried by the successor, not yet committed
    conn.created(successor, "resp_2")
    assert conn.held.held == 0


def test_injected_input_is_held_until_the_rollout_takes_it_or_returns_it() -> None:
    conn = Connection(compose("appended"), inject=True)
    [start] = conn.receive(create_frame())
    conn.created(start.job, "resp_1")
    frame = json.dumps(
        {"type": "response.inject", "response_id": "resp_1", "input": [{"role": "user", "content": "x"}]}
    )
    conn.receive(frame)
    assert conn.held.held == len(frame)
    assert conn.take_input(start.job) == [{"role": "user", "content": "x"}]
    assert conn.held.held == 0
    conn.receive(frame)
    [returned] = [a.event for a in conn.finished(start.job, Failed()) if isinstance(a, Send)]
    assert returned["type"] == "response.inject.failed" and conn.held.held == 0


def test_a_connection_that_ends_gives_what_it_held_back_to_its_key() -> None:
    key = HeldBytes(10_000, "this API key")
    conn = Connection(compose("websocket"), held_by_key=key)
    conn.receive(create_frame())  # starts at once
    waiting = create_frame(input="again")  # waits behind it on the default lane: held
    conn.receive(waiting)
    assert key.held == conn.held.held == len(waiting)
    conn.held.release()
    assert key.held == 0
