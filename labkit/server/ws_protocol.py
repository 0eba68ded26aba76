"""The WebSocket protocol uvicorn runs for labkit, bounded in what a client's frames cost.

uvicorn's sans-I/O protocol (``websockets``' parser) answers every ping with a pong written
straight to the socket, and keeps a fragmented message as a list of its fragments. So a
client that sends pings and never reads their pongs grows the server's send buffer without
bound (50 MB of pings: 46 MB), and one message in 1,000,000 one-byte fragments costs about
50 bytes of bookkeeping per byte (51 MB). ``BoundedWebSocket`` keeps both within the
connection's documented bound (docs/protocol.md, Limits):

- while the client leaves more than the socket's buffer (64 KiB) unread, nothing more is read
  from it: its next pings wait in its own kernel's buffers, unanswered, as its creates do;
- a message's fragments are joined as they come, in one buffer, and each counts at least
  ``MIN_FRAGMENT_BYTES`` toward ``--max-frame-bytes``: a message past it closes with 1009,
  as a frame past it does (and the parser works through at most a few thousand fragments
  a message, about 7 µs each).

    uvicorn.Config(app, ws=BoundedWebSocket, ws_max_size=2 * 1024 * 1024)
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame

MIN_FRAGMENT_BYTES = 1024  # what a fragment counts toward the message's bound, at least
TOO_BIG = 1009  # the close code for a message over the bound (RFC 6455: message too big)


class BoundedWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol, with pongs and fragments held to the connection's bound."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.message = bytearray()  # the fragments of the message being received, joined
        self.message_cost = 0  # what they count toward the bound (``MIN_FRAGMENT_BYTES`` each, at least)
        self.too_big = False  # closed for a message over the bound: later frames are ignored

    # ------------------------------------------------ a client that takes nothing is read no more

    def pause_writing(self) -> None:
        """The client has left the socket's buffer unread: read nothing more from it meanwhile."""
        super().pause_writing()
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self.read_paused:  # uvicorn's own pause (a message the app has not taken) holds
            self.transport.resume_reading()

    async def receive(self) -> Any:
        """uvicorn's ``receive``, which resumes reading once the app has taken every message,
        unless the client is leaving what it is sent unread."""
        message = await self.queue.get()
        if self.read_paused and self.queue.empty():
            self.read_paused = False
            if self.writable.is_set():
                self.transport.resume_reading()
        return message

    # ------------------------------------------------ fragments, joined and counted

    def handle_text(self, event: Frame) -> None:
        self.start_message(event)
        super().handle_text(event)

    def handle_bytes(self, event: Frame) -> None:
        self.start_message(event)
        super().handle_bytes(event)

    def start_message(self, event: Frame) -> None:
        self.message = bytearray(event.data) if not event.fin else bytearray()
        self.message_cost = max(len(event.data), MIN_FRAGMENT_BYTES)

    def handle_cont(self, event: Frame) -> None:
        if self.too_big:  # parsed in the same read as the fragment that closed the connection
            return
        self.message_cost += max(len(event.data), MIN_FRAGMENT_BYTES)
        if self.message_cost > (self.config.ws_max_size or self.message_cost):
            self.too_big, self.message = True, bytearray()
            self.conn.fail(TOO_BIG, "message too big: too many fragments")
            self.handle_parser_exception()
            return
        self.message += event.data
        if event.fin:
            self.frames = [bytes(self.message)]  # what uvicorn hands the app: the message, whole
            self.message = bytearray()
            self.send_receive_event_to_app()
