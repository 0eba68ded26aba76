"""A client that vanishes gives its key's caps back within about a second (``KeyLimiter``).

A subscription to ``/v1/labkit/traces/stream`` counts against its key's cap of open connections,
and an HTTP request against its cap of requests in flight, until its answer ends. A client that
closes its socket sends a FIN, which TCP cannot tell from a client that only shut its side and
reads on; the old server took it for the latter and kept answering nobody: a trace subscription
until two heartbeats had failed (some 20 s), an SSE answer waiting for an engine slot until it
had one. Now the server probes such a client (``labkit.server.edge.half_close``) and drops it once it
answers with a reset, which ends what ran for it and gives its caps back.

A real ``labkit serve`` on loopback and raw sockets. The waits are bounds on hanging, far above
the second it takes and far below the time the old server held the caps for.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable, Iterator

import pytest

from labkit.client.launcher import LabkitServer
from tests.helpers import port_of

pytestmark = pytest.mark.slow  # servers of its own

CAP = 2  # labkit serve --max-connections-per-key: open subscriptions of one key
RELEASED_WITHIN_S = 5.0  # the caps are given back within this, at most (it takes about a second)
RECV_TIMEOUT_S = 10.0
LONG = "Write 30000 tokens."  # half a minute at labkit-spark's pace
SLOTS = 8  # the local profile's engine.max_concurrent


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    caps = ["--max-connections-per-key", str(CAP), "--max-requests-per-key", "1"]
    with LabkitServer(args=["--profile", "local", *caps]) as running:
        yield running


def connect(server: LabkitServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port_of(server)), timeout=RECV_TIMEOUT_S)


def read_until(sock: socket.socket, marker: bytes, seen: bytes = b"") -> bytes:
    """What the server sent (after ``seen``), up to and including ``marker`` (or the connection's end)."""
    while marker not in seen:
        chunk = sock.recv(65536)
        if not chunk:
            break
        seen += chunk
    return seen


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def subscribe(server: LabkitServer, key: str) -> tuple[socket.socket, int]:
    """A subscription to the trace stream, read up to its first line (all it was sent), or refused."""
    sock = connect(server)
    request = f"GET /v1/labkit/traces/stream HTTP/1.1\r\nHost: labkit\r\nAuthorization: Bearer {key}\r\n\r\n"
    sock.sendall(request.encode())
    answer = read_until(sock, b"\r\n")
    if status_of(answer) == 200:
        read_until(sock, b": subscribed\n\n", answer)
    return sock, status_of(answer)


def accepted_again(attempt: Callable[[], bool], within_s: float) -> bool:
    """Whether ``attempt`` (True once accepted) is accepted within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if attempt():
            return True
        time.sleep(0.1)
    return False


def test_subscriptions_closed_by_their_clients_give_their_places_back(server: LabkitServer) -> None:
    key = "sk-watcher"
    first = [subscribe(server, key) for _ in range(CAP)]
    assert [status for _, status in first] == [200] * CAP
    for sock, _ in first:
        sock.close()  # everything sent was read: a FIN, as from a notebook that exited

    def two_more() -> bool:
        tries = [subscribe(server, key) for _ in range(CAP)]
        for sock, _ in tries:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset: gone at once, whichever way it was answered
        return all(status == 200 for _, status in tries)

    assert accepted_again(two_more, RELEASED_WITHIN_S), "the old server: 429 for some 20 s"


def test_an_answer_waiting_for_a_slot_gives_its_keys_place_back_when_its_client_leaves(
    server: LabkitServer,
) -> None:
    """Another key fills the engine; this key's SSE answer waits for a slot, its client leaves,
    and the key (capped at one request in flight) is served again."""
    filling = []
    for i in range(SLOTS):  # a key each: every key may have one request in flight
        sock = connect(server)
        sock.sendall(create_request(f"sk-fills-slot-{i}", stream=False))
        filling.append(sock)
    time.sleep(1.0)  # each holds its slot, for half a minute
    try:
        waiting = connect(server)
        waiting.sendall(create_request("sk-leaves", stream=True))
        head, _, rest = read_until(waiting, b"event: response.in_progress\n").partition(b"in_progress\n")
        assert status_of(head) == 200
        assert b"output_text" not in read_until(
            waiting, b"\n\n", rest
        )  # all it was sent: it waits for a slot
        waiting.close()  # a FIN

        def served() -> bool:
            with connect(server) as sock:
                sock.sendall(
                    b"GET /v1/models HTTP/1.1\r\nHost: labkit\r\nAuthorization: Bearer sk-leaves\r\n\r\n"
                )
                return status_of(read_until(sock, b"\r\n")) == 200

        assert accepted_again(served, RELEASED_WITHIN_S), "the old server: 429 until a slot freed"
    finally:
        for sock in filling:
            sock.close()


def create_request(key: str, *, stream: bool) -> bytes:
    body = json.dumps({"model": "labkit-spark", "input": LONG, "store": False, "stream": stream}).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: labkit\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body
