"""What a client does on the wire, below HTTP's requests: half-sent heads, ambiguous framing, a
half-close, a disappearance mid-body, a body in a flood of tiny chunks, a room that runs the
server out of file descriptors (``labkit.server.edge.wire_limits``, ``TrackedHTTP``).

A real ``labkit serve`` on loopback and raw sockets, so every byte is the test's. What is
asserted is what comes back (status, error code, the close) and what the server logs; where a
wait is needed it is a bound on hanging, never a measurement.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from labkit.client.launcher import LabkitServer
from labkit.limits import MAX_BODY_CHUNKS
from tests.helpers import ERROR_KEYS, root_of

pytestmark = pytest.mark.slow  # servers of its own

HEAD_TIMEOUT_S = 1.0  # labkit serve --head-timeout, short: each case waits for it once
HANG_BOUND_S = 20.0  # how long a socket read waits before the test calls it a hang
HALF_HEAD = b"POST /v1/responses HTTP/1.1\r\nHost: labkit\r\n"  # a request line and one header
FLOOD_CHUNKS = 700_000  # one-byte chunks of a 0.7 MB body


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local", "--head-timeout", str(HEAD_TIMEOUT_S)]) as running:
        yield running


def connect(server: LabkitServer) -> socket.socket:
    url = httpx.URL(server.base_url)
    sock = socket.create_connection((url.host, url.port), timeout=HANG_BOUND_S)
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset after its answer counts as the end)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def answers(data: bytes) -> list[tuple[int, dict]]:
    """The HTTP answers in ``data``: each status and JSON body (answers carry a content-length)."""
    found = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        found.append((status, json.loads(rest[:length])))
        data = rest[length:]
    return found


def request(body: bytes, *headers: str, path: str = "/v1/responses") -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: labkit", "Authorization: Bearer sk-wire", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


CREATE = json.dumps({"model": "labkit-spark", "input": "Say hi.", "store": False}).encode()


def assert_error(body: dict, code: str | None) -> None:
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    assert body["error"]["code"] == code, body


# ---------------------------------------------------------------- a request head's deadline


def test_a_head_that_never_ends_is_a_408_and_a_close(server: LabkitServer) -> None:
    with connect(server) as sock:
        sock.sendall(HALF_HEAD)  # and nothing more: the old server held it forever
        [(status, body)] = answers(read_to_end(sock))
    assert status == 408
    assert_error(body, "request_timeout")


def test_a_connection_that_sends_nothing_is_closed(server: LabkitServer) -> None:
    with connect(server) as sock:
        assert read_to_end(sock) == b""  # closed, with nothing to answer


def test_a_head_that_arrives_slowly_but_in_time_is_served(server: LabkitServer) -> None:
    with connect(server) as sock:
        whole = request(CREATE, f"Content-Length: {len(CREATE)}", "Connection: close")
        for part in (whole[:20], whole[20:]):  # two parts, well within the deadline
            sock.sendall(part)
        [(status, body)] = answers(read_to_end(sock))
    assert status == 200 and body["status"] == "completed"


# ---------------------------------------------------------------- framing


def test_content_length_with_transfer_encoding_is_refused_and_the_connection_closed(
    server: LabkitServer,
) -> None:
    hidden = b"GET /v1/models HTTP/1.1\r\nHost: labkit\r\nAuthorization: Bearer sk-wire\r\n\r\n"
    chunked = b"0\r\n\r\n" + hidden  # the chunked body ends at once: the rest is a second request
    with connect(server) as sock:
        sock.sendall(request(chunked, f"Content-Length: {len(chunked)}", "Transfer-Encoding: chunked"))
        found = answers(read_to_end(sock))
    assert [status for status, _ in found] == [400], found  # the old server answered the hidden one too
    assert_error(found[0][1], None)
    assert "Content-Length or Transfer-Encoding" in found[0][1]["error"]["message"]


def test_a_client_that_half_closes_after_its_requests_gets_every_answer(server: LabkitServer) -> None:
    with connect(server) as sock:
        one = request(CREATE, f"Content-Length: {len(CREATE)}")
        sock.sendall(one + one)  # two requests, pipelined
        sock.shutdown(socket.SHUT_WR)  # "that is all": the old server closed without answering
        found = answers(read_to_end(sock))
    assert [(status, body["status"]) for status, body in found] == [(200, "completed")] * 2


def test_a_client_gone_mid_body_is_one_log_line(server: LabkitServer) -> None:
    mark = len(server.log)
    for _ in range(3):
        with connect(server) as sock:
            sock.sendall(request(CREATE[:10], f"Content-Length: {len(CREATE)}"))  # and then it is gone
    health = httpx.get(f"{root_of(server)}/healthz", timeout=HANG_BOUND_S)
    assert health.status_code == 200
    deadline = time.monotonic() + HANG_BOUND_S
    while time.monotonic() < deadline and len(gone_lines(server, mark)) < 3:
        time.sleep(0.05)
    assert len(gone_lines(server, mark)) == 3
    assert not any("Traceback" in line for line in list(server.log)[mark:])


def gone_lines(server: LabkitServer, mark: int) -> list[str]:
    return [line for line in list(server.log)[mark:] if "closed its connection before the body" in line]


def test_a_body_in_too_many_chunks_is_refused_before_the_server_reads_it_all(server: LabkitServer) -> None:
    flood = b"1\r\nx\r\n" * FLOOD_CHUNKS + b"0\r\n\r\n"
    sent: list[int] = []

    def send(sock: socket.socket) -> None:
        view, total = memoryview(flood), 0
        try:
            while total < len(flood):
                total += sock.send(view[total : total + 65536])
        except OSError:
            pass  # the server closed: it had read enough
        sent.append(total)

    with connect(server) as sock:
        sock.sendall(request(b"", "Transfer-Encoding: chunked"))
        sender = threading.Thread(target=send, args=(sock,), daemon=True)
        sender.start()
        found = answers(read_to_end(sock))
        sender.join(HANG_BOUND_S)
    assert [status for status, _ in found] == [413], found  # the old server parsed it all: a 400
    assert_error(found[0][1], "too_many_body_chunks")
    assert str(MAX_BODY_CHUNKS) in found[0][1]["error"]["message"]
    assert sent and sent[0] < len(flood)  # refused before the whole flood was sent


# ---------------------------------------------------------------- out of file descriptors


def test_out_of_descriptors_the_open_connections_are_served_and_it_is_said_once(tmp_path: Path) -> None:
    args = ["--profile", "local", "--head-timeout", str(HEAD_TIMEOUT_S)]
    with (
        LabkitServer(db=tmp_path / "room.sqlite3", args=args) as server,
        httpx.Client(timeout=HANG_BOUND_S) as kept,
    ):
        health = f"{root_of(server)}/healthz"
        assert kept.get(health).status_code == 200  # a keep-alive connection, opened before
        pid = server.processes()[0]
        spare = 8
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + spare, in_use + spare))
        half_sent = []
        try:
            for _ in range(spare + 24):  # more than it can accept: the rest wait in the listen queue
                sock = connect(server)
                sock.sendall(HALF_HEAD)
                half_sent.append(sock)
            assert wait_for(lambda: shortage_lines(server) != [])
            assert kept.get(health).status_code == 200  # served while new connections wait
            # The heads never come: each accepted one is closed at its deadline, freeing its
            # descriptor for the next in the queue; then a new client is served.
            assert httpx.get(health, timeout=HANG_BOUND_S * 2).status_code == 200
        finally:
            for sock in half_sent:
                sock.close()
    log = list(server.log)
    assert len(shortage_lines(server)) == 1, shortage_lines(server)
    assert not any("Traceback" in line or "socket.accept() out of system resource" in line for line in log)


def shortage_lines(server: LabkitServer) -> list[str]:
    return [line for line in list(server.log) if "out of file descriptors" in line]


def wait_for(done: object, timeout_s: float = HANG_BOUND_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False
