"""A WebSocket client's frames cost the server memory only within the connection's documented
bound, control frames and fragments included (``labkit.server.ws.protocol``).

A real ``labkit serve`` on loopback and a raw client socket with a small receive buffer that
completes the handshake, then sends what the old server let grow without bound: pings whose
pongs it never reads (50 MB of them grew the server by 46 MB), and one message in 1,000,000
one-byte fragments (51 MB for 1 MB of payload). What is asserted is the mechanism: the server
stops reading a client that takes none of its pongs (so the client cannot even send it all),
and closes a message of too many fragments with 1009 before it has read them; and the server's
peak memory grows by less than ``GROWTH_LIMIT_KB`` (the bound is about 1.3 MiB a connection).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from labkit.client.launcher import LabkitServer
from labkit.server.ws.protocol import BoundedWebSocket, ws_protocol

RCVBUF = 4096  # the client's receive buffer: the kernel holds next to nothing for it
PING = 125  # bytes of a ping's payload, the most a control frame carries
PING_FLOOD_BYTES = 50 * 1024 * 1024
FRAGMENTS = 1_000_000
SEND_STALL_S = 2.0  # a send that makes no progress this long: the server stopped reading
GROWTH_LIMIT_KB = 8 * 1024  # peak RSS growth allowed: a few times the bound, for the allocator's slack


@pytest.fixture(scope="module")
def server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local"]) as running:
        yield running


MASK = b"\x5a\xa5\x3c\xc3"  # one mask for every frame, so a flood is one frame repeated


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A client frame, masked as a client's must be (a zero mask would spare the server the copy
    each unmasked payload costs, which is what a real client's fragments cost it)."""
    size = len(payload)
    length = bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + size.to_bytes(2, "big")
    masked = bytes(byte ^ MASK[i % 4] for i, byte in enumerate(payload))
    return bytes([(0x80 if fin else 0) | opcode]) + length + MASK + masked


def upgraded(server: LabkitServer) -> socket.socket:
    url = httpx.URL(server.base_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.settimeout(10)
    sock.connect((url.host, url.port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET {url.path}/responses HTTP/1.1\r\nHost: {url.host}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Authorization: Bearer sk-ws-memory\r\n\r\n".encode()
    )
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def send_until_stalled(sock: socket.socket, data: bytes) -> int:
    """Send ``data``; stop when a send makes no progress for ``SEND_STALL_S``. Bytes sent."""
    sock.settimeout(SEND_STALL_S)
    view, sent = memoryview(data), 0
    try:
        while sent < len(data):
            sent += sock.send(view[sent : sent + 65536])
    except (TimeoutError, OSError):
        pass
    return sent


def peak_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def close_code(sock: socket.socket) -> int | None:
    """Read the server's frames until its close frame: its code (None if the connection just ended)."""
    sock.settimeout(10)
    reader = sock.makefile("rb")
    try:
        while head := reader.read(2):
            size = head[1] & 0x7F
            if size >= 126:
                size = int.from_bytes(reader.read(2 if size == 126 else 8), "big")
            payload = reader.read(size)
            if head[0] & 0x0F == 0x8:
                return int.from_bytes(payload[:2], "big")
    except OSError:
        pass
    return None


def test_pings_whose_pongs_are_never_read_stop_being_read(server: LabkitServer) -> None:
    pid = server.processes()[0]
    flood = frame(0x9, b"p" * PING) * (PING_FLOOD_BYTES // (PING + 6))
    before = peak_kb(pid)
    with upgraded(server) as sock:
        sent = send_until_stalled(sock, flood)
        grown = peak_kb(pid) - before
    # The old server read every ping and queued its pong, however many went unread.
    assert sent < len(flood) // 4, (sent, len(flood))
    assert grown < GROWTH_LIMIT_KB, grown


def test_a_message_in_too_many_fragments_is_closed_with_1009(server: LabkitServer) -> None:
    pid = server.processes()[0]
    message = frame(0x1, b"x", fin=False) + frame(0x0, b"x", fin=False) * (FRAGMENTS - 2) + frame(0x0, b"x")
    before = peak_kb(pid)
    with upgraded(server) as sock:
        sent = send_until_stalled(sock, message)
        code = close_code(sock)
        grown = peak_kb(pid) - before
    assert code == 1009  # too big: the old server kept every fragment, then answered the message
    assert sent < len(message), sent
    assert grown < GROWTH_LIMIT_KB, grown


def test_bounded_websocket_forwards_the_whole_protocol_interface() -> None:
    # A method of asyncio.Protocol left to the base class would be its no-op, never the wrapped one.
    interface = {n for n in dir(asyncio.Protocol) if not n.startswith("_")}
    assert interface <= set(vars(BoundedWebSocket)), interface - set(vars(BoundedWebSocket))
    assert issubclass(ws_protocol(BoundedWebSocket.ws), asyncio.Protocol)
