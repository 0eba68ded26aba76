"""A WebSocket connection's outgoing events: one writer, and the cut of a client that reads too slowly.

Events go out through the connection's ``Outbox``: a response queues them and goes on
decoding, and one writer task hands them to the socket, the only task that waits for a
client that reads slowly. So a client that stops reading holds its own events, never an
engine slot. Past ``max_unread_bytes`` unread (``labkit serve --max-unread-bytes``) the
connection is cut: its responses end (failed, not stored, the reason in their traces:
``labkit.server.ws.websocket``) and it closes with 1008 ``client too slow: N bytes unread``;
if the client has not answered the close within ``CLOSE_GRACE_S`` (it waits behind what
the client has not read), the connection is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from starlette.websockets import WebSocket, WebSocketDisconnect

from labkit.api.echo import bounded
from labkit.api.events import Event
from labkit.api.sse import encode_event
from labkit.server.edge.network import drop_if_stuck, transport_of
from labkit.server.edge.outbox import Outbox, SlowReader

TOO_SLOW = 1008  # the close code for a client that left too much unread (policy violation)
CLOSE_GRACE_S = 2.0  # how long a close frame may wait for the client before the connection drops


class ConnectionWriter:
    """The outbox of one connection, the task that writes it to the socket, and the cut.

    ``on_cut`` runs once, when the client has left too much unread: it ends the
    connection's responses, before the writer stops and the close goes out.
    """

    def __init__(self, ws: WebSocket, max_unread_bytes: int, on_cut: Callable[[], None]) -> None:
        self.ws = ws
        self.outbox: Outbox[str] = Outbox(max_unread_bytes, on_overflow=self._cut)
        self.slow: SlowReader | None = None  # set once the client left too much unread
        self.on_cut = on_cut
        self.task: asyncio.Task[None] | None = None
        self.closer: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._write())

    def put(self, event: Event, stream_id: str | None = None) -> None:
        """Queue an event, without waiting for the socket (``SlowReader`` past the bound). An
        error's message is clipped (``labkit.api.echo.bounded``): one that quotes a client's
        value never costs more than a few KB."""
        if stream_id is not None:
            event = {**event, "stream_id": stream_id}
        self.outbox.put(encode_event(bounded(event)))

    def end(self) -> None:
        """Nothing more will be queued: the writer closes (1000) once the queued events are out."""
        self.outbox.end()

    async def _write(self) -> None:
        """The one task that waits for the client: the outbox's events to the socket, in order."""
        try:
            async for text in self.outbox:
                await self.ws.send_text(text)
        except SlowReader:
            return  # the cut closes the connection (``_cut``)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.outbox.end()  # the client has gone (WebSocketSession.run sees it): nothing queued
            return
        await close(self.ws, 1000)  # ended: the connection's lifetime is over

    def _cut(self, slow: SlowReader) -> None:
        """Past the bound: the connection's responses end now, their engine slots freed, and the
        connection closes with the reason (the outbox has dropped the unread events)."""
        self.slow = slow
        self.on_cut()  # the responses it ends read the reason from ``self.slow``
        if self.task is not None:
            self.task.cancel()  # it may be waiting for the socket, which the client does not read
        self.closer = asyncio.create_task(close(self.ws, TOO_SLOW, slow.reason, cut=True))

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def closed(self) -> None:
        """Wait for a cut's close: done by now, or within its grace."""
        if self.closer is not None:
            with contextlib.suppress(Exception):
                await self.closer


async def close(ws: WebSocket, code: int, reason: str = "", *, cut: bool = False) -> None:
    """Close with ``code``; if the close frame cannot go out within ``CLOSE_GRACE_S`` (it waits
    behind what the client has not read), drop the connection instead. A ``cut`` connection is
    also dropped if, that long after its close frame, the client has not answered it."""
    transport = transport_of((ws.client.host, ws.client.port) if ws.client else None)
    try:
        await asyncio.wait_for(ws.close(code=code, reason=reason), CLOSE_GRACE_S)
    except TimeoutError:
        drop_if_stuck(transport)
        return
    except Exception:  # closed already, or gone
        return
    if cut:  # a client too slow to read may never take the close frame it was given
        await asyncio.sleep(CLOSE_GRACE_S)
        drop_if_stuck(transport, closing=True)
