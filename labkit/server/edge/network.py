"""The network between client and server, modeled on top of real loopback sockets.

Loopback has no latency worth the name, so the profile's round-trip time is
added where a real network would cost it: half when a request arrives, half
before the first event of the response stream leaves (so every event, the first
token included, arrives that much later), and the TCP and TLS handshakes
when a request arrives on a connection the server has not seen before. Whether
a connection is new is read off the real socket (the client's address and
port), so a client that opens a fresh connection per request pays for it and
one that keeps its connection alive does not.

The HTTP server learns that a connection closed from asyncio itself: ``TrackedHTTP`` is a
protocol that wraps, by composition, the one uvicorn resolves for its ``--http`` setting,
and forwards every call of the asyncio protocol interface to it. It also holds each
connection to the bounds of ``labkit.server.edge.wire_limits`` (a request head's deadline, one
request's framing, a body's chunks), and answers a client that half-closes its side after
its request (``shutdown(SHUT_WR)``): the answer goes out, then the connection closes; if the
answer is slow to come, the client is probed (``labkit.server.edge.half_close``), and one whose
socket has in fact closed is dropped, so what runs for it stops. Once the
server is short of file descriptors (``labkit.server.edge.descriptors``), a request head has the
shorter deadline, so connections that never send theirs make room for new clients.
"""

from __future__ import annotations

import asyncio
import functools
import re
import weakref
from http import HTTPStatus
from typing import Any

import h11
from cachetools import LRUCache

from labkit import limits
from labkit.api import safejson
from labkit.api.errors import APIError, invalid_request
from labkit.server.edge.descriptors import DescriptorReserve, descriptor_of, open_files_limit
from labkit.server.edge.half_close import PROBE_AFTER_S, probe_bytes, watch_for_reset
from labkit.server.edge.wire_limits import BoundedH11, head_timeout

# Enough to remember every live connection of a busy workshop.
MAX_REMEMBERED = 65_536
# A request's line and headers together (what h11 buffers before the body): past it, a 431.
# Real clients send a few KiB; h11's own default, made labkit's (``labkit serve`` sets it).
MAX_HEADER_BYTES = 16 * 1024
# Where a head ends, as h11 finds it: a blank line, CRLF or bare LF.
HEAD_END = re.compile(rb"\n\r?\n")


def head_timeout_while_short(seconds: float) -> APIError:
    """The 408 of a head that missed the deadline the server sets while short of descriptors.

    >>> head_timeout_while_short(1.0).message.split(",")[0]
    "The request's line and headers did not arrive within 1 s"
    """
    return APIError(
        408,
        f"The request's line and headers did not arrive within {seconds:g} s, this server's deadline "
        "while it is short of connections for new clients; send a request's line and headers at once.",
        code="request_timeout",
    )


class ConnectionTracker:
    """Remembers which client addresses (host, port) have a connection open.

    The HTTP server tells every tracker when a connection closes, so a later
    connection that happens to reuse the port counts as new again. Past ``MAX_REMEMBERED``
    the least recently seen is forgotten (``cachetools``).
    """

    def __init__(self) -> None:
        self._seen: LRUCache[tuple[str, int], bool] = LRUCache(MAX_REMEMBERED)
        _TRACKERS.add(self)

    def is_new(self, client: tuple[str, int] | None) -> bool:
        """True the first time a (host, port) is seen: a new TCP connection."""
        if client is None:
            return True
        key = (str(client[0]), int(client[1]))
        if self._seen.get(key):  # a hit is now the most recently seen
            return False
        self._seen[key] = True
        return True

    def forget(self, client: tuple[str, int] | None) -> None:
        if client is not None:
            self._seen.pop((str(client[0]), int(client[1])), None)


_TRACKERS: weakref.WeakSet[ConnectionTracker] = weakref.WeakSet()
# Every live connection's transport by its peer's (host, port), for ``abort``.
_TRANSPORTS: weakref.WeakValueDictionary[tuple[str, int], asyncio.BaseTransport] = (
    weakref.WeakValueDictionary()
)


def transport_of(client: tuple[str, int] | None) -> asyncio.BaseTransport | None:
    """The transport of the connection from ``client``, None if it is not known.

    Connections served through ``TrackedHTTP`` are known (a WebSocket too: it starts as an
    HTTP request); an in-process test client's are not. Look it up while the connection is
    open: once it has closed, its address may be another connection's.
    """
    return _TRANSPORTS.get((str(client[0]), int(client[1]))) if client else None


def drop_if_stuck(transport: asyncio.BaseTransport | None, *, closing: bool = False) -> bool:
    """Drop a connection (``abort``: unsent bytes and all) if its peer has not taken all it was
    sent, or with ``closing`` (it was sent a WebSocket close) has not answered the close; True
    if it did. The end for a peer that stopped reading, whose close frame or last chunk would
    otherwise wait behind what it has not read, forever."""
    if not isinstance(transport, asyncio.WriteTransport):
        return False
    stuck = transport.get_write_buffer_size() > 0 or (closing and not transport.is_closing())
    if stuck:
        transport.abort()
    return stuck


def client_of(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    """The (host, port) of a connection's peer, as the ASGI scope's ``client`` gives it."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return str(peer[0]), int(peer[1])
    return None  # a Unix socket: no port to remember


@functools.cache
def http_protocol(http: str) -> type[asyncio.Protocol]:
    """The protocol class uvicorn itself uses for ``Config(http=...)`` ("h11", "httptools", "auto")."""
    import uvicorn

    async def no_app(scope: Any, receive: Any, send: Any) -> None:
        """Never called: the config is loaded only to resolve its protocol."""

    config = uvicorn.Config(no_app, http=http, log_config=None, lifespan="off")
    config.load()
    resolved = config.http_protocol_class
    # A buffered protocol reads through get_buffer/buffer_updated, which plain forwarding would lose.
    if not issubclass(resolved, asyncio.Protocol) or issubclass(resolved, asyncio.BufferedProtocol):
        raise TypeError(f"uvicorn's {http!r} HTTP protocol {resolved!r} is not a plain asyncio.Protocol")
    return resolved


class TrackedHTTP(asyncio.Protocol):
    """uvicorn's HTTP/1.1 protocol (h11), which also reports closed connections to the trackers.

    Pass the class as ``uvicorn.Config(http=TrackedHTTP)``: uvicorn builds one per connection
    with its own arguments, handed on unchanged to the protocol it wraps.
    """

    http = "h11"  # the --http setting wrapped: the same parser labkit always served with
    head_timeout_s = limits.HEAD_TIMEOUT_S  # for a request's line and headers to arrive
    max_body_chunks = limits.MAX_BODY_CHUNKS
    descriptors = DescriptorReserve()  # one per server: ``configured`` gives each its own

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.inner = http_protocol(self.http)(*args, **kwargs)
        self.client: tuple[str, int] | None = None
        self.head_timer: asyncio.TimerHandle | None = None
        self.head_since = 0.0  # when the head awaited began to be (the loop's clock)
        self.head_window_s = self.head_timeout_s  # its deadline, from then
        self.half_closed = False  # the client shut its side down after a whole request
        # uvicorn's parser, bounded in what one request may cost (labkit.server.edge.wire_limits).
        self.inner.conn = BoundedH11(h11.SERVER, self.head_limit(), max_body_chunks=self.max_body_chunks)
        # uvicorn answers a request h11 cannot parse in plain text; the API's shape instead.
        self.inner.send_400_response = self.refuse_unparsed
        # Bound before a request's cycle reads it, so each cycle reports its end here.
        self._answered = self.inner.on_response_complete
        self.inner.on_response_complete = self.response_complete

    @classmethod
    def configured(
        cls,
        head_timeout_s: float,
        *,
        descriptor_reserve: int = limits.DESCRIPTOR_RESERVE,
        head_timeout_when_short_s: float = limits.HEAD_TIMEOUT_WHEN_SHORT_S,
    ) -> type[TrackedHTTP]:
        """The protocol class for ``uvicorn.Config(http=...)`` with other head timeouts and
        descriptor reserve, and a reserve of its own (its server's connections).

        uvicorn.Config(app, http=TrackedHTTP.configured(head_timeout_s=2.0))
        """
        # Resolved now, at start: resolving it imports modules (opens files), which the first
        # connection of a server out of descriptors could not do, and asyncio would drop it silently.
        http_protocol(cls.http)
        reserve = DescriptorReserve(descriptor_reserve, head_timeout_when_short_s)
        return type(cls.__name__, (cls,), {"head_timeout_s": head_timeout_s, "descriptors": reserve})

    def head_limit(self) -> int:
        """The bound on a request's line and headers: uvicorn's setting, else ``MAX_HEADER_BYTES``."""
        config = getattr(self.inner, "config", None)
        return getattr(config, "h11_max_incomplete_event_size", None) or MAX_HEADER_BYTES

    def head_too_large(self) -> APIError:
        limit = self.head_limit()
        return APIError(
            431,
            f"The request's line and headers are larger than this server's limit of {limit} bytes.",
            code="request_header_fields_too_large",
        )

    def head_outgrows_limit(self, data: bytes) -> bool:
        """Whether the request head being read, with ``data``, is past the bound.

        h11 bounds only a head still unfinished after a read; one read whole (a socket read takes
        up to 256 KiB) would pass it, so the bound is checked here, before h11 sees the bytes.
        """
        conn = getattr(self.inner, "conn", None)
        if conn is None or conn.their_state is not h11.IDLE:  # a request's body, or no request yet
            return False
        pending, _closed = conn.trailing_data
        limit = self.head_limit()
        if len(pending) + len(data) <= limit:
            return False
        return HEAD_END.search(pending + data[: limit + 4], 0, limit + 4) is None

    def unparsed_error(self) -> APIError:
        """What a request h11 refused gets: the bound it broke (``BoundedH11``), a 431 if its head
        outgrew the bound, else a 400."""
        if self.inner.conn.refusal is not None:
            return self.inner.conn.refusal
        buffered, _closed = self.inner.conn.trailing_data  # h11's buffer: the head that did not parse
        if len(buffered) > self.head_limit():
            return self.head_too_large()
        return invalid_request("We could not parse the HTTP request.")

    def refuse_unparsed(self, _message: str) -> None:
        self.refuse(self.unparsed_error())

    def refuse(self, err: APIError) -> None:
        """Send ``err`` as JSON and close, as uvicorn closes after its own answer to a bad request."""
        body = safejson.dumps(err.body()).encode()
        head = (
            f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        transport = self.inner.transport
        transport.write(head.encode() + body)  # the request was never parsed: no state to keep
        transport.close()

    # ------------------------------------------------ a request head's deadline, and a half-close

    def watch_head(self) -> None:
        """Start the head's clock while a request head is awaited, and stop it once one is read.

        From the connection's start, and from a later request's first byte (between requests,
        uvicorn's keep-alive timeout closes an idle connection). While the server is short of
        descriptors the clock runs for the shorter deadline.
        """
        if self.inner.conn.their_state is h11.IDLE:
            if self.head_timer is None:
                loop = asyncio.get_running_loop()
                self.head_since = loop.time()
                self.head_window_s = self.head_timeout_s
                if self.descriptors.short:
                    self.head_window_s = min(self.head_window_s, self.descriptors.head_timeout_s)
                self.head_timer = loop.call_at(self.head_since + self.head_window_s, self.head_too_late)
                self.descriptors.waiting(self)
        elif self.head_timer is not None:
            self.stop_head_clock()

    def stop_head_clock(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        self.descriptors.arrived(self)

    def hurry_head(self) -> None:
        """The server is short of descriptors: the head awaited has the shorter deadline, counted
        from when it began to be awaited (past already: it is late now)."""
        if self.head_timer is None or self.head_window_s <= self.descriptors.head_timeout_s:
            return
        self.head_timer.cancel()
        self.head_window_s = self.descriptors.head_timeout_s
        loop = asyncio.get_running_loop()
        self.head_timer = loop.call_at(self.head_since + self.head_window_s, self.head_too_late)

    def head_too_late(self) -> None:
        """No whole request head in time: a 408 if part of one came, else a plain close."""
        self.head_timer = None
        self.descriptors.arrived(self)  # not arrived, but no longer awaited: it frees its descriptor
        transport = self.inner.transport
        if self.inner.conn.their_state is not h11.IDLE or transport is None or transport.is_closing():
            return
        pending, _closed = self.inner.conn.trailing_data
        if not pending:
            transport.close()
        elif self.head_window_s < self.head_timeout_s:
            self.refuse(head_timeout_while_short(self.head_window_s))
        else:
            self.refuse(head_timeout(self.head_timeout_s))

    def response_complete(self) -> None:
        """uvicorn's end of an answer; then, for a client that half-closed, the connection's end
        once no other request of its is being answered."""
        self._answered()
        if self.half_closed and self.inner.conn.their_state is h11.IDLE:
            self.inner.transport.close()

    def probe_peer(self) -> None:
        """The client shut its side ``PROBE_AFTER_S`` ago and an answer is still to come: send it
        a probe, and drop the connection if it answers with a reset (``labkit.server.edge.half_close``)."""
        cycle, transport = self.inner.cycle, self.inner.transport
        if cycle is None or cycle.response_complete or transport.is_closing():
            return
        probe = probe_bytes(self.inner.conn, event_stream=self.inner.conn.event_stream)
        if probe is not None:
            transport.write(probe)
            watch_for_reset(transport)

    # ------------------------------------------------ the asyncio protocol interface

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = client_of(transport)
        if self.client is not None:
            _TRANSPORTS[self.client] = transport
        self.inner.connection_made(transport)
        self.watch_head()
        # After watch_head: should this connection make the server short, its own head is hurried too.
        self.descriptors.accepted(descriptor_of(transport), open_files_limit())

    def data_received(self, data: bytes) -> None:
        if self.head_outgrows_limit(data):
            self.refuse(self.head_too_large())
            return
        self.inner.data_received(data)
        self.watch_head()

    def eof_received(self) -> bool | None:
        """The client shut its side down. After a whole request whose answer is still to come,
        the transport stays open for the answer (``response_complete`` closes it); otherwise,
        mid-head or mid-body, nothing more can come and the connection closes."""
        conn, cycle = self.inner.conn, self.inner.cycle
        if conn.their_state is h11.DONE and cycle is not None and not cycle.response_complete:
            self.half_closed = True
            asyncio.get_running_loop().call_later(PROBE_AFTER_S, self.probe_peer)
            return True
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_head_clock()
        for tracker in list(_TRACKERS):
            tracker.forget(self.client)
        self.inner.connection_lost(exc)

    def __getattr__(self, name: str) -> Any:
        # Anything else uvicorn asks of its protocol (shutdown, flags) is the wrapped one's.
        if name == "inner":  # not built yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
