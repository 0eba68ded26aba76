"""The network between client and server, modeled on real loopback sockets (``labkit.server.edge.network``).

Whether a request opened a connection is read off the real socket: a client that opens a fresh
connection per request pays the TCP and TLS handshakes every time, one that keeps its connection
alive pays them once, and a connection from a reused port is new once the earlier one has closed
(``TrackedHTTP``, wrapping uvicorn's h11 protocol, tells the trackers). Every request pays half
the round trip arriving and half before the first byte of its answer leaves. The wrapped protocol
also answers a request h11 cannot parse in the API's error shape: a 431 past the header bound,
else a 400. And a connection whose peer stopped reading can be dropped, unsent bytes and all.

Read off the server's spans, off the sleeps the network stages ask for (recorded instead of
slept), and off real loopback sockets: never off the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from labkit.client.transports import StatelessHTTP, TurnRequest, TurnResult
from labkit.engine import timing
from labkit.paths import default_data_dir
from labkit.profiles import Network, load_profile, profile_toml
from labkit.server.app import ServerConfig, create_app
from labkit.server.edge.network import (
    MAX_HEADER_BYTES,
    MAX_REMEMBERED,
    ConnectionTracker,
    TrackedHTTP,
    client_of,
    drop_if_stuck,
    http_protocol,
    transport_of,
)
from labkit.server.stages.door import Connect, Downlink, Upgrade, Uplink
from tests.helpers import (
    API_KEY,
    ERROR_KEYS,
    assert_api_error,
    assert_serving,
    auth_headers,
    by_stage,
    root_of,
    served_in_thread,
    server_spans,
    ws_connect,
    ws_turn,
)

pytestmark = pytest.mark.slow  # servers of its own

MODEL = "labkit-spark"

# ---------------------------------------------------------------- the tracker, in process


def test_connection_tracker_is_bounded() -> None:
    tracker = ConnectionTracker()
    for port in range(MAX_REMEMBERED + 100):
        tracker.is_new(("10.0.0.1", port))
    assert len(tracker._seen) == MAX_REMEMBERED


def test_an_address_is_new_once_until_its_connection_is_forgotten() -> None:
    tracker = ConnectionTracker()
    assert [tracker.is_new(("127.0.0.1", 5000)) for _ in range(3)] == [True, False, False]
    assert tracker.is_new(("127.0.0.1", 5001)) and tracker.is_new(("10.0.0.1", 5000))  # another port, host
    tracker.forget(("127.0.0.1", 5000))  # its connection closed
    assert tracker.is_new(("127.0.0.1", 5000))
    assert not tracker.is_new(("127.0.0.1", 5001))  # the others are still open
    tracker.forget(None)  # a Unix socket's connection: nothing was remembered
    assert tracker.is_new(None) and tracker.is_new(None)  # no port to remember: always new


def test_past_its_bound_the_tracker_forgets_the_least_recently_seen() -> None:
    tracker = ConnectionTracker()
    for port in range(MAX_REMEMBERED):
        tracker.is_new(("10.0.0.1", port))
    assert not tracker.is_new(("10.0.0.1", 0))  # the oldest, seen again: now the most recent
    assert tracker.is_new(("10.0.0.2", 1))  # one more: the least recently seen goes
    assert not tracker.is_new(("10.0.0.1", 0))
    assert tracker.is_new(("10.0.0.1", 1))


# ---------------------------------------------------------------- closed connections reach the trackers


def test_tracked_http_forwards_the_whole_protocol_interface() -> None:
    # A method of asyncio.Protocol left to the base class would be its no-op, never the wrapped one.
    interface = {n for n in dir(asyncio.Protocol) if not n.startswith("_")}
    assert interface <= set(vars(TrackedHTTP)), interface - set(vars(TrackedHTTP))
    assert issubclass(http_protocol(TrackedHTTP.http), asyncio.Protocol)


@pytest.fixture
def tracked_server() -> Iterator[tuple[str, list[bool]]]:
    """A uvicorn server with ``http=TrackedHTTP`` whose app records, per request, whether its
    connection is new; yields its URL and the record."""
    tracker = ConnectionTracker()
    opened: list[bool] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        opened.append(tracker.is_new(scope["client"]))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with served_in_thread(app, http=TrackedHTTP, lifespan="off") as url:
        yield url, opened


def requests_on_one_connection(url: str, count: int, port: int = 0) -> None:
    """``count`` HTTP/1.1 requests over one new TCP connection from ``port``, then a reset."""
    address = httpx.URL(url)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.settimeout(10)
        sock.bind(("127.0.0.1", port))
        sock.connect((address.host, address.port))
        for _ in range(count):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: labkit\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nok"):
                chunk = sock.recv(4096)
                assert chunk, answer
                answer += chunk
        # A reset, not a FIN: no TIME_WAIT, so the next connection may bind the same port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_keep_alive_is_one_connection(tracked_server: tuple[str, list[bool]]) -> None:
    url, opened = tracked_server
    with httpx.Client() as client:
        assert [client.get(url).status_code for _ in range(3)] == [200] * 3
    requests_on_one_connection(url, 2)
    assert opened == [True, False, False, True, False]


def test_a_reused_port_is_new_once_its_connection_closed(tracked_server: tuple[str, list[bool]]) -> None:
    url, opened = tracked_server
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    requests_on_one_connection(url, 1, port)
    time.sleep(0.2)  # the server's event loop sees the reset
    requests_on_one_connection(url, 1, port)
    assert opened == [True, True]


# ---------------------------------------------------------------- a connection's transport


async def answer_ok(send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_open_connections_transport_is_found_by_its_client_address() -> None:
    found: list[tuple[str, int] | None] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        transport = transport_of(scope["client"])  # looked up while the connection is open
        found.append(None if transport is None else client_of(transport))
        await answer_ok(send)

    port = free_port()
    with served_in_thread(app, http=TrackedHTTP, lifespan="off") as url:
        requests_on_one_connection(url, 2, port)
    assert found == [("127.0.0.1", port)] * 2  # the server's end of this very connection
    assert transport_of(None) is None
    assert transport_of(("192.0.2.1", 9)) is None  # never connected


class Made(asyncio.Protocol):
    """A server's end of a connection that hands its transport over, and does nothing else."""

    def __init__(self, made: asyncio.Future[asyncio.BaseTransport]) -> None:
        self.made = made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.set_result(transport)


@contextlib.asynccontextmanager
async def one_connection() -> AsyncIterator[tuple[asyncio.WriteTransport, socket.socket]]:
    """One TCP connection on loopback, with small buffers: asyncio's transport for the server's
    end, and the peer's socket, which reads only when the test does."""
    loop = asyncio.get_running_loop()
    made: asyncio.Future[asyncio.BaseTransport] = loop.create_future()
    server = await loop.create_server(lambda: Made(made), "127.0.0.1", 0)
    peer = socket.socket()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peer.setblocking(False)
    await loop.sock_connect(peer, server.sockets[0].getsockname())
    transport = await asyncio.wait_for(made, 10)
    assert isinstance(transport, asyncio.WriteTransport)
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    try:
        yield transport, peer
    finally:
        transport.abort()
        peer.close()
        server.close()


async def read_to_end(peer: socket.socket) -> int:
    """Bytes the peer receives until its connection ends (a FIN or a reset); bounded."""
    loop, received = asyncio.get_running_loop(), 0

    async def drain() -> None:
        nonlocal received
        with contextlib.suppress(ConnectionResetError):
            while chunk := await loop.sock_recv(peer, 65536):
                received += len(chunk)

    await asyncio.wait_for(drain(), 10)
    return received


def test_a_peer_that_stopped_reading_is_dropped_unsent_bytes_and_all() -> None:
    payload = b"x" * 4_000_000

    async def scenario() -> tuple[int, bool, bool, int, int]:
        async with one_connection() as (transport, peer):
            transport.write(payload)  # far more than the peer's and the kernel's buffers take
            unsent = transport.get_write_buffer_size()
            dropped = drop_if_stuck(transport)
            return (
                unsent,
                dropped,
                transport.is_closing(),
                transport.get_write_buffer_size(),
                await read_to_end(peer),
            )

    unsent, dropped, closing, left, received = asyncio.run(scenario())
    assert unsent > 0  # the precondition: the peer has not taken all it was sent
    assert dropped and closing and left == 0
    assert received < len(payload)  # the connection ended without what was never sent


def test_a_peer_that_took_everything_is_kept_unless_it_left_a_close_unanswered() -> None:
    async def scenario() -> list[tuple[bool, bool]]:
        outcomes = []
        async with one_connection() as (transport, peer):
            transport.write(b"hello")
            assert await asyncio.get_running_loop().sock_recv(peer, 5) == b"hello"  # all taken
            outcomes.append((drop_if_stuck(transport), transport.is_closing()))
            # It was sent a WebSocket close and has not answered it (its transport is still open).
            outcomes.append((drop_if_stuck(transport, closing=True), transport.is_closing()))
        async with one_connection() as (transport, _peer):
            transport.close()  # the close was answered: the server is closing the connection
            outcomes.append((drop_if_stuck(transport, closing=True), transport.is_closing()))
        return outcomes

    kept, unanswered, answered = asyncio.run(scenario())
    assert kept == (False, False)
    assert unanswered == (True, True)
    assert answered == (False, True)
    assert drop_if_stuck(None) is False  # no transport known (an in-process test client's)


def test_a_tcp_peer_is_its_address_and_a_unix_socket_peer_has_none(tmp_path: Path) -> None:
    async def scenario() -> tuple[tuple[str, int] | None, tuple[str, int], tuple[str, int] | None]:
        async with one_connection() as (transport, peer):
            tcp, expected = client_of(transport), peer.getsockname()
        unix = None
        if hasattr(socket, "AF_UNIX") and sys.platform != "win32":
            loop = asyncio.get_running_loop()
            made: asyncio.Future[asyncio.BaseTransport] = loop.create_future()
            path = str(tmp_path / "s")
            server = await loop.create_unix_server(lambda: Made(made), path)
            _reader, writer = await asyncio.open_unix_connection(path)
            unix = client_of(await asyncio.wait_for(made, 10))
            writer.close()
            server.close()
        return tcp, expected, unix

    tcp, expected, unix = asyncio.run(scenario())
    assert tcp == expected and isinstance(tcp[1], int)
    assert unix is None


# ---------------------------------------------------------------- handshakes, read off the socket
# On the session's ``labkit serve`` (production-like): each response's connect span says whether
# its request opened a connection.


def one_turn(transport: StatelessHTTP, text: str = "Say hello.") -> TurnResult:
    user = {"type": "message", "role": "user", "content": text}
    return transport.turn(
        TurnRequest(model=MODEL, instructions="Be brief.", tools=[], history=[user], new=[user])
    )


def test_new_connection_per_request_pays_the_handshake_every_time(server: LabkitServer) -> None:
    transport = StatelessHTTP(server.base_url, API_KEY, "sprint", fresh_connection=True)
    ids = [one_turn(transport).response_id for _ in range(3)]
    transport.close()
    for rid in ids:
        assert by_stage(server_spans(server.base_url, rid))["connect"]["detail"] == {"new_connection": True}


def test_keep_alive_client_pays_the_handshake_once(server: LabkitServer) -> None:
    transport = StatelessHTTP(server.base_url, API_KEY, "sprint")
    try:
        ids = [one_turn(transport).response_id for _ in range(3)]
    finally:
        transport.close()
    opened = [
        by_stage(server_spans(server.base_url, rid))["connect"]["detail"]["new_connection"] for rid in ids
    ]
    assert opened == [True, False, False]


def test_fresh_httpx_client_per_request_is_a_new_connection(server: LabkitServer) -> None:
    for _ in range(2):
        with httpx.Client(timeout=30) as http:
            reply = http.post(
                f"{server.base_url}/responses", json={"model": MODEL, "input": "Hi."}, headers=auth_headers()
            )
        assert reply.status_code == 200, reply.text
        connect_span = by_stage(server_spans(server.base_url, reply.json()["id"]))["connect"]
        assert connect_span["detail"]["new_connection"] is True


def raw_request_from(port: int, server: LabkitServer) -> str:
    """One HTTP/1.1 request over a new TCP connection bound to ``port``, then a reset (no TIME_WAIT)."""
    url = httpx.URL(server.base_url)
    host, server_port = url.host, url.port
    body = json.dumps({"model": MODEL, "input": "Hi.", "store": False}).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.settimeout(30)
        sock.bind(("127.0.0.1", port))
        sock.connect((host, server_port))
        sock.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        header, rest = data.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":")[1])
            for line in header.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(rest) < length:
            rest += sock.recv(65536)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    return json.loads(rest)["id"]


def test_a_new_connection_from_a_reused_port_pays_the_handshake(server: LabkitServer) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ids = [raw_request_from(port, server) for _ in range(2)]  # two TCP connections, one after the other
    opened = [
        by_stage(server_spans(server.base_url, rid))["connect"]["detail"]["new_connection"] for rid in ids
    ]
    assert opened == [True, True]


def test_websocket_set_up_is_reported_with_the_first_response_only(server: LabkitServer) -> None:
    with ws_connect(server) as ws:
        first = ws_turn(ws, input="Say hello.", store=False)
        second = ws_turn(ws, input=[{"role": "user", "content": "Again."}], previous_response_id=first["id"])
        third = ws_turn(ws, input="Unrelated.", store=False)
    stages = [[s["stage"] for s in server_spans(server.base_url, r["id"])] for r in (first, second, third)]
    assert stages[0][:3] == ["connect", "upgrade", "auth"]
    assert by_stage(server_spans(server.base_url, first["id"]))["connect"]["detail"]["new_connection"] is True
    for later in stages[1:]:
        assert not {"connect", "upgrade", "auth"} & set(later), later


# ---------------------------------------------------------------- the round trip, split

# A 40 ms round trip: 20 ms each way, 80 ms for the TCP and TLS handshakes, 40 ms for an upgrade.
NETWORK = Network(rtt_ms=40, tcp_handshake_round_trips=1, tls_handshake_round_trips=1)
ONE_WAY, HANDSHAKES, ROUND_TRIP = pytest.approx(0.020), pytest.approx(0.080), pytest.approx(0.040)
# The pipeline's stages that model it, by their class.
NETWORK_STAGES = {Connect: "connect", Upgrade: "upgrade", Uplink: "uplink", Downlink: "downlink"}


@pytest.fixture(scope="module")
def modeled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[tuple[str, Any]]]]:
    """The real app served in this process through ``TrackedHTTP``, with the local profile but for
    ``NETWORK``; every sleep a network stage asks for is recorded (the stage, the seconds)
    instead of slept. Its base URL and the record."""
    tmp = tmp_path_factory.mktemp("network")
    profile = tmp / "network-only.toml"
    profile.write_text(profile_toml(replace(load_profile("local", default_data_dir()), network=NETWORK)))
    asked: list[tuple[str, Any]] = []
    real_sleep = timing.sleep

    async def sleep(seconds: float, **kwargs: Any) -> None:
        stage = NETWORK_STAGES.get(type(sys._getframe(1).f_locals.get("self")))  # the stage awaiting it
        if stage is not None:
            asked.append((stage, seconds))
        else:
            await real_sleep(seconds, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timing, "sleep", sleep)
        app = create_app(ServerConfig(db=str(tmp / "labkit.db"), profile=str(profile)))
        with served_in_thread(app, http=TrackedHTTP) as url:
            yield f"{url}v1", asked


def test_an_http_request_pays_half_the_round_trip_each_way_and_the_handshakes_once(
    modeled: tuple[str, list[tuple[str, Any]]],
) -> None:
    base_url, asked = modeled
    with OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0) as client:  # one kept-alive connection
        asked.clear()
        client.responses.create(model=MODEL, input="Say hello.")
        first = asked[:]
        asked.clear()
        events = list(client.responses.create(model=MODEL, input="Write 40 tokens.", stream=True))
        streamed = asked[:]
    assert first == [("connect", HANDSHAKES), ("uplink", ONE_WAY), ("downlink", ONE_WAY)]
    # The same connection: no handshakes; and one downlink for the whole stream, not one per event.
    assert len(events) > 2
    assert streamed == [("uplink", ONE_WAY), ("downlink", ONE_WAY)]


def test_websocket_mode_pays_the_handshakes_and_the_upgrade_once_then_half_each_way(
    modeled: tuple[str, list[tuple[str, Any]]],
) -> None:
    base_url, asked = modeled

    def completed(connection: Any) -> Any:
        for event in connection:
            if event.type == "response.completed":
                return event.response
        raise AssertionError("the socket closed before the response completed")

    asked.clear()
    with (
        OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0) as client,
        client.responses.connect() as ws,
    ):
        ws.response.create(model=MODEL, input="Say hello.", store=False)
        first = completed(ws)
        set_up = asked[:]
        asked.clear()
        follow_up = [{"role": "user", "content": "Again."}]
        ws.response.create(model=MODEL, input=follow_up, previous_response_id=first.id, store=False)
        completed(ws)
        again = asked[:]
    assert set_up == [
        ("connect", HANDSHAKES),
        ("upgrade", ROUND_TRIP),
        ("uplink", ONE_WAY),
        ("downlink", ONE_WAY),
    ]
    assert again == [("uplink", ONE_WAY), ("downlink", ONE_WAY)]


# ---------------------------------------------------------------- requests h11 cannot parse


def test_an_oversized_request_header_is_a_431_in_the_error_shape(server: LabkitServer) -> None:
    for path in ("/healthz", "/v1/models"):
        reply = httpx.get(f"{root_of(server)}{path}", headers={"x-padding": "a" * 1_000_000}, timeout=30)
        assert reply.headers["content-type"] == "application/json"
        error = assert_api_error(reply, 431)
        assert (error["type"], error["param"], error["code"]) == (
            "invalid_request_error",
            None,
            "request_header_fields_too_large",
        )
    # Headers within the bound (16 KiB for the request line and headers) are served as usual.
    fine = httpx.get(f"{root_of(server)}/healthz", headers={"x-padding": "a" * 8_000}, timeout=30)
    assert fine.status_code == 200
    assert_serving(server)


def test_a_request_that_is_not_http_gets_a_400_in_the_error_shape(server: LabkitServer) -> None:
    host, port = httpx.URL(server.base_url).host, httpx.URL(server.base_url).port
    assert port is not None
    with socket.create_connection((host, port), timeout=30) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"application/json" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == ERROR_KEYS and error["type"] == "invalid_request_error"
    assert_serving(server)


def raw_answer(url: str, request: bytes) -> tuple[bytes, bytes]:
    """Send ``request`` on a new connection and read until the server closes it: (head, body)."""
    address = httpx.URL(url)
    with socket.create_connection((address.host, address.port), timeout=30) as raw:
        raw.sendall(request)
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize("ending", [b"", b"\r\n\r\n", b"\n\n"], ids=["unfinished", "whole", "bare-lf"])
@pytest.mark.parametrize(("setting", "limit"), [(4096, 4096), (None, MAX_HEADER_BYTES)], ids=["set", "unset"])
def test_a_head_outgrowing_uvicorns_bound_or_else_16_kib_is_a_431(
    setting: int | None, limit: int, ending: bytes
) -> None:
    # h11 bounds only a head still unfinished after a read; labkit bounds one read whole as well.
    unfinished = b"GET / HTTP/1.1\r\nHost: labkit\r\nx-padding: " + b"a" * (limit + 100) + ending

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await answer_ok(send)

    config = {} if setting is None else {"h11_max_incomplete_event_size": setting}
    with served_in_thread(app, http=TrackedHTTP, lifespan="off", **config) as url:
        head, body = raw_answer(url, unfinished)
        within = httpx.get(url, headers={"x-padding": "a" * (limit - 1000)}, timeout=30)
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), head
    assert b"connection: close" in head.lower() and b"application/json" in head.lower()
    error = json.loads(body)["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_header_fields_too_large")
    assert error["message"] == (
        f"The request's line and headers are larger than this server's limit of {limit} bytes."
    )
    assert within.status_code == 200 and within.text == "ok"


def test_a_body_is_not_counted_in_the_head(server: LabkitServer) -> None:
    """A small head and a large body, sent in one write, are one request served as usual."""
    body = json.dumps({"model": MODEL, "input": "x " * 60_000}).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: labkit\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer sk-local\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    answer_head, answer = raw_answer(root_of(server), head.encode() + body)
    assert answer_head.startswith(b"HTTP/1.1 200 "), answer_head
    assert json.loads(answer)["status"] == "completed"
