"""The WebSocket protocol uvicorn runs for labkit, bounded in what a client's frames cost.

uvicorn's sans-I/O protocol (``websockets``' parser) answers every ping with a pong written
straight to the socket, and keeps a fragmented message as a list of its fragments. So a
client that sends pings and never reads their pongs grows the server's send buffer without
bound (50 MB of pings: 44 MB), and one message in 1,000,000 one-byte fragments costs about
90 bytes of bookkeeping per byte. ``BoundedWebSocket`` keeps both within the connection's
documented bound (docs/protocol.md, Limits):

- while the client leaves more than the socket's buffer (64 KiB) unread, nothing more is read
  from it: its next pings wait in its own kernel's buffers, unanswered, as its creates do;
- a message's fragments are joined as they come, in one buffer, and each counts at least
  ``MIN_FRAGMENT_BYTES`` toward ``--max-frame-bytes``: a message past it closes with 1009,
  as a frame past it does (and the parser works through at most a few thousand fragments
  a message, about 7 µs each).

Like ``labkit.server.edge.network.TrackedHTTP``, it wraps by composition the protocol uvicorn
resolves for a setting (``ws = "websockets-sansio"``) and forwards the asyncio protocol
interface to it; the handlers it bounds are the wrapped instance's, replaced on it.

    uvicorn.Config(app, ws=BoundedWebSocket, ws_max_size=2 * 1024 * 1024)
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from websockets.frames import Frame

MIN_FRAGMENT_BYTES = 1024  # what a fragment counts toward the message's bound, at least
TOO_BIG = 1009  # the close code for a message over the bound (RFC 6455: message too big)
# What of the wrapped protocol this one relies on (uvicorn's sans-I/O WebSocket protocol).
RELIED_ON = ("handle_text", "handle_bytes", "handle_cont", "receive", "send_receive_event_to_app")


@functools.cache
def ws_protocol(ws: str) -> type[asyncio.Protocol]:
    """The protocol class uvicorn itself uses for ``Config(ws=...)``."""
    import uvicorn

    async def no_app(scope: Any, receive: Any, send: Any) -> None:
        """Never called: the config is loaded only to resolve its protocol."""

    config = uvicorn.Config(no_app, ws=ws, log_config=None, lifespan="off")
    config.load()
    resolved = config.ws_protocol_class
    if resolved is None or not all(hasattr(resolved, name) for name in RELIED_ON):
        raise TypeError(f"uvicorn's {ws!r} WebSocket protocol {resolved!r} is not the sans-I/O one")
    return resolved


class BoundedWebSocket(asyncio.Protocol):
    """uvicorn's WebSocket protocol, with pongs and fragments held to the connection's bound."""

    ws = "websockets-sansio"  # the --ws setting wrapped

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.inner = ws_protocol(self.ws)(*args, **kwargs)
        self.message = bytearray()  # the fragments of the message being received, joined
        self.message_cost = 0  # what they count toward the bound (``MIN_FRAGMENT_BYTES`` each, at least)
        self.too_big = False  # closed for a message over the bound: later frames are ignored
        inner = self.inner
        self._text, self._bytes = inner.handle_text, inner.handle_bytes
        inner.handle_text, inner.handle_bytes = self.handle_text, self.handle_bytes
        inner.handle_cont, inner.receive = self.handle_cont, self.receive

    # ------------------------------------------------ a client that takes nothing is read no more

    def pause_writing(self) -> None:
        """The client has left the socket's buffer unread: read nothing more from it meanwhile."""
        self.inner.pause_writing()
        self.inner.transport.pause_reading()

    def resume_writing(self) -> None:
        self.inner.resume_writing()
        if not self.inner.read_paused:  # uvicorn's own pause (a message the app has not taken) holds
            self.inner.transport.resume_reading()

    async def receive(self) -> Any:
        """uvicorn's ``receive``, which resumes reading once the app has taken every message,
        unless the client is leaving what it is sent unread."""
        inner = self.inner
        message = await inner.queue.get()
        if inner.read_paused and inner.queue.empty():
            inner.read_paused = False
            if inner.writable.is_set():
                inner.transport.resume_reading()
        return message

    # ------------------------------------------------ fragments, joined and counted

    def handle_text(self, event: Frame) -> None:
        self.start_message(event)
        self._text(event)

    def handle_bytes(self, event: Frame) -> None:
        self.start_message(event)
        self._bytes(event)

    def start_message(self, event: Frame) -> None:
        self.message = bytearray(event.data) if not event.fin else bytearray()
        self.message_cost = max(len(event.data), MIN_FRAGMENT_BYTES)

    def handle_cont(self, event: Frame) -> None:
        inner = self.inner
        if self.too_big:  # parsed in the same read as the fragment that closed the connection
            return
        self.message_cost += max(len(event.data), MIN_FRAGMENT_BYTES)
        if self.message_cost > (inner.config.ws_max_size or self.message_cost):
            self.too_big, self.message = True, bytearray()
            inner.conn.fail(TOO_BIG, "message too big: too many fragments")
            inner.handle_parser_exception()
            return
        self.message += event.data
        if event.fin:
            inner.frames = [bytes(self.message)]  # what uvicorn hands the app: the message, whole
            self.message = bytearray()
            inner.send_receive_event_to_app()

    # ------------------------------------------------ the rest of the asyncio protocol interface

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def __getattr__(self, name: str) -> Any:
        # Anything else uvicorn asks of its protocol (shutdown, its state) is the wrapped one's.
        if name == "inner":  # not built yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
