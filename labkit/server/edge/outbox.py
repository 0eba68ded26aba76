"""A connection's outgoing frames: queued without waiting for the socket, bounded in bytes.

A response's task puts its events here and goes on decoding; one consumer (the
WebSocket writer, or the SSE body) takes them in order and hands them to the
socket, which is what waits when the client reads slowly. So a client that stops
reading holds up only its own frames, never a response's engine slot, and what it
has not read is bounded: past ``limit`` unread bytes the outbox overflows, drops
what it holds, and the connection's responses are cut (``SlowReader``).

    >>> box = Outbox(limit=8)
    >>> box.put("hello"); box.unread
    5
    >>> box.put("world")
    Traceback (most recent call last):
    ...
    labkit.server.edge.outbox.SlowReader: client too slow: 10 bytes unread (limit 8)
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

Frame = TypeVar("Frame", str, bytes)


class SlowReader(Exception):
    """The client left more than the outbox's limit unread: its responses are cut."""

    def __init__(self, unread: int, limit: int) -> None:
        self.unread, self.limit = unread, limit
        super().__init__(self.reason)

    @property
    def reason(self) -> str:
        """A WebSocket close reason (at most 123 bytes) and the message a trace records."""
        return f"client too slow: {self.unread} bytes unread (limit {self.limit})"


class Outbox(Generic[Frame]):
    """Frames on their way to one client, in order; iterate it (once) to send them.

    A frame counts as unread from ``put`` until the consumer asks for the next one: by then
    the socket has taken it. Sizes are ``len(frame)``: bytes, or a text frame's characters.
    ``on_overflow`` runs once, inside the ``put`` that overflowed; that ``put``, every later
    one and the consumer raise ``SlowReader``. After ``end``, the consumer stops once the
    queued frames are out, and later frames are dropped.

        >>> box = Outbox(limit=100); box.put("a"); box.put("bc"); box.end()
        >>> async def sent() -> list[str]:
        ...     return [frame async for frame in box]
        >>> asyncio.run(sent()), box.unread
        (['a', 'bc'], 0)
    """

    def __init__(self, limit: int, on_overflow: Callable[[SlowReader], None] | None = None) -> None:
        self.limit = limit
        self.unread = 0  # bytes put and not yet taken by the socket
        self.overflow: SlowReader | None = None
        self.ended = False
        self._frames: deque[Frame] = deque()
        self._taken = 0  # the size of the frame the consumer is writing
        self._wake = asyncio.Event()
        self._on_overflow = on_overflow

    def put(self, frame: Frame) -> None:
        """Queue ``frame`` without waiting; ``SlowReader`` past the limit (no per-frame lock)."""
        if self.overflow is not None:
            raise SlowReader(self.overflow.unread, self.limit)
        if self.ended:
            return  # the connection is closing: nothing more goes out
        self.unread += len(frame)
        if self.unread > self.limit:
            self._overflowed()
        self._frames.append(frame)
        self._wake.set()

    def end(self) -> None:
        """No more frames: the consumer stops after those queued."""
        self.ended = True
        self._wake.set()

    def _overflowed(self) -> None:
        self.overflow = slow = SlowReader(self.unread, self.limit)
        self._frames.clear()  # the client will never see them: free the memory now
        self._wake.set()
        if self._on_overflow is not None:
            self._on_overflow(slow)
        raise SlowReader(slow.unread, self.limit)

    def __aiter__(self) -> Outbox[Frame]:
        return self

    async def __anext__(self) -> Frame:
        self.unread -= self._taken  # asked again: the previous frame was written
        self._taken = 0
        while not self._frames:
            if self.overflow is not None:
                raise SlowReader(self.overflow.unread, self.limit)
            if self.ended:
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()
        frame = self._frames.popleft()
        self._taken = len(frame)
        return frame
