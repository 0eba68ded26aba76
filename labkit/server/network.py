"""The network between client and server, modeled on top of real loopback sockets.

Loopback has no latency worth the name, so the profile's round-trip time is
added where a real network would cost it: half when a request arrives, half
before the first byte of the answer leaves, and the TCP and TLS handshakes
when a request arrives on a connection the server has not seen before. Whether
a connection is new is read off the real socket (the client's address and
port), so a client that opens a fresh connection per request pays for it and
one that keeps its connection alive does not.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

from uvicorn.protocols.http.h11_impl import H11Protocol

# Enough to remember every live connection of a busy workshop.
MAX_REMEMBERED = 65_536


class ConnectionTracker:
    """Remembers which client addresses (host, port) have a connection open.

    The HTTP server tells every tracker when a connection closes, so a later
    connection that happens to reuse the port counts as new again.
    """

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        _TRACKERS.add(self)

    def is_new(self, client: tuple[str, int] | None) -> bool:
        """True the first time a (host, port) is seen: a new TCP connection."""
        if client is None:
            return True
        key = (str(client[0]), int(client[1]))
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        while len(self._seen) > MAX_REMEMBERED:
            self._seen.popitem(last=False)
        return True

    def forget(self, client: tuple[str, int] | None) -> None:
        if client is not None:
            self._seen.pop((str(client[0]), int(client[1])), None)


_TRACKERS: weakref.WeakSet[ConnectionTracker] = weakref.WeakSet()


class TrackedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, which also reports closed connections to the trackers."""

    def connection_lost(self, exc: Exception | None) -> None:
        for tracker in list(_TRACKERS):
            tracker.forget(self.client)
        super().connection_lost(exc)
