"""Half-sent requests piling up do not lock new clients out (``labkit.server.edge.descriptors``).

A client that opens connections and sends a request line and one header on each, then nothing
(a buggy loop), used to run the server out of file descriptors at its soft limit: a new
client's ``/healthz`` then waited in the listen queue until the half-sent requests reached their
head timeout. Now ``labkit serve`` raises its soft limit at start as far as the hard limit
allows, and once fewer than ``--descriptor-reserve`` descriptors are free, a request head has
``--head-timeout-when-short`` to arrive, so the half-sent requests make room within a second.

A real ``labkit serve`` on loopback and raw sockets, its limit lowered (``prlimit``, Linux) so
that a few dozen sockets are a pile-up. The head timeout is a minute, far past every bound here:
a half-sent request closed sooner was closed by the shortage. What is asserted is what comes
back and what the server logs; a wait is a bound on hanging, never a measurement.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from labkit.client.launcher import LabkitServer
from labkit.limits import DESCRIPTOR_RESERVE, OPEN_FILES_WANTED
from tests.helpers import ERROR_KEYS, root_of

pytestmark = [
    pytest.mark.slow,  # servers of its own
    pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc (Linux)"),
]

HEAD_TIMEOUT_S = 60.0  # --head-timeout: never reached while the test runs
HANG_BOUND_S = 20.0  # how long a read waits before the test calls it a hang
HALF_HEAD = b"POST /v1/responses HTTP/1.1\r\nHost: labkit\r\n"  # a request line and one header
SPARE = 24  # descriptors left to the server: fewer than the reserve, so it is short at once
PILE_UP = SPARE + 24  # more half-sent requests than it has descriptors for
LOW_SOFT_LIMIT = 256  # the soft limit a server is started with (macOS's default)


def half_sent(server: LabkitServer, count: int) -> list[socket.socket]:
    url = httpx.URL(server.base_url)
    socks = []
    for _ in range(count):
        sock = socket.create_connection((url.host, url.port), timeout=HANG_BOUND_S)
        sock.sendall(HALF_HEAD)  # accepted or still in the listen queue: the kernel takes it either way
        socks.append(sock)
    return socks


def read_to_end(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def shortage_lines(server: LabkitServer) -> list[str]:
    return [line for line in list(server.log) if "short of file descriptors" in line]


def test_a_new_client_is_served_while_half_sent_requests_hold_every_descriptor(tmp_path: Path) -> None:
    args = ["--profile", "local", "--head-timeout", str(HEAD_TIMEOUT_S)]
    with LabkitServer(db=tmp_path / "room.sqlite3", args=args) as server:
        pid = server.processes()[0]
        limit = len(os.listdir(f"/proc/{pid}/fd")) + SPARE
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))  # as if it could not raise it
        socks = half_sent(server, PILE_UP)
        try:
            # The old server answered only once the half-sent requests reached their head
            # timeout, a minute from now: this read would hang past its bound.
            health = httpx.get(f"{root_of(server)}/healthz", timeout=HANG_BOUND_S)
            assert health.status_code == 200
            # The first half-sent request was closed by the shortage, with a 408 in the API's shape.
            answer = read_to_end(socks[0])
        finally:
            for sock in socks:
                sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    error = httpx.Response(408, content=body).json()["error"]
    assert set(error) == ERROR_KEYS
    assert error["code"] == "request_timeout" and "short of connections" in error["message"], error
    assert len(shortage_lines(server)) == 1, shortage_lines(server)  # said once, not per connection
    assert not any("Traceback" in line for line in server.log)


@contextlib.contextmanager
def started_with_soft_limit(tmp_path: Path, soft: int) -> Iterator[LabkitServer]:
    """``labkit serve`` started with ``soft`` open files as its soft limit (inherited from here)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, before[1]))
    try:
        server = LabkitServer(db=tmp_path / "room.sqlite3", args=["--head-timeout", str(HEAD_TIMEOUT_S)])
        server.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
    try:
        yield server
    finally:
        server.close()


def soft_limit_of(pid: int) -> int:
    return resource.prlimit(pid, resource.RLIMIT_NOFILE)[0]


def test_serve_raises_a_low_soft_limit_and_a_pile_up_past_it_costs_nobody(tmp_path: Path) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if raised < 2 * LOW_SOFT_LIMIT + DESCRIPTOR_RESERVE:  # room for the pile-up and the reserve
        pytest.skip(f"the hard limit on open files here ({hard}) leaves nothing to raise the soft one to")
    with started_with_soft_limit(tmp_path, LOW_SOFT_LIMIT) as server:
        assert soft_limit_of(server.processes()[0]) == raised  # the old server kept 256
        socks = half_sent(server, LOW_SOFT_LIMIT + 16)  # past the limit it started with
        try:
            health = httpx.get(f"{root_of(server)}/healthz", timeout=HANG_BOUND_S)
            assert health.status_code == 200
            # Not short: the half-sent requests are left their whole head timeout, none closed yet.
            for sock in socks:
                sock.setblocking(False)
                with pytest.raises(BlockingIOError):
                    sock.recv(1)
        finally:
            for sock in socks:
                sock.close()
    assert shortage_lines(server) == []
