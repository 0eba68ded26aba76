"""File descriptors: how many the server may hold, and keeping some free for new clients.

Every connection holds a file descriptor, and a process may hold at most its soft limit
(``RLIMIT_NOFILE``), which most sessions start at 1,024 (macOS: 256), far below what the
system allows (the hard limit). At the limit the server cannot accept: a new client waits in
the listen queue. A client that opens connections and sends only part of a request on each (a
buggy loop) gets there fast, and each of its connections would hold its descriptor until the
head timeout (``--head-timeout``, 10 s). So:

- ``labkit serve`` raises its soft limit at start, as far as the hard limit allows and at most
  to ``limits.OPEN_FILES_WANTED`` (``raise_open_files_limit``); ``--workers`` inherit it;
- the server keeps ``--descriptor-reserve`` descriptors for new clients (``DescriptorReserve``):
  once fewer are free, every request head still awaited, and every one awaited from then on,
  has ``--head-timeout-when-short`` (1 s) to arrive instead, so half-sent requests give their
  descriptors back within a second and new clients are accepted and served. A client that sends
  its request at once is not affected: its head arrives within a round trip, well under a second.

Whether the server is short costs nothing to find out: descriptors are handed out lowest number
first (POSIX), so a connection accepted as descriptor ``n`` means that ``0 .. n-1`` are all in
use. Where there is no soft limit to read (Windows) the reserve is never short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from typing import Protocol

from labkit import limits

log = logging.getLogger("uvicorn.error")  # the server's own log, as uvicorn configures it

try:
    import resource
except ImportError:  # Windows: no soft limit on sockets to raise or read
    resource = None  # type: ignore[assignment]

# macOS refuses a soft limit on open files above OPEN_MAX, whatever the hard limit says.
DARWIN_OPEN_MAX = 10_240


def open_files_limit() -> int | None:
    """The soft limit on open files now; None where there is none (Windows, or no limit)."""
    if resource is None:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def raise_open_files_limit(wanted: int = limits.OPEN_FILES_WANTED) -> int | None:
    """Raise the soft limit on open files to ``wanted``, or as far as the hard limit allows; never
    lower it. Returns the soft limit in force (None where there is none).

        raise_open_files_limit()   # at 1,024 with a hard limit of 524,288: now 8,192
    """
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if sys.platform == "darwin":
        target = min(target, DARWIN_OPEN_MAX)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(OSError, ValueError):  # a system that says no: serve within its limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return open_files_limit()


class HeadWait(Protocol):
    """A connection waiting for its request head, which can be told to hurry."""

    def hurry_head(self) -> None: ...


class DescriptorReserve:
    """The connections still waiting for a whole request head, and whether descriptors run short.

    ``accepted`` is told each new connection's descriptor; the one that leaves fewer than
    ``reserve`` free makes the server short, and every head then awaited is hurried: it has
    ``head_timeout_s`` from its start. The server stays short until no head is awaited: then the
    half-sent requests have given their descriptors back.

        >>> class Conn:
        ...     def hurry_head(self): print("hurried")
        >>> reserve, conn = DescriptorReserve(reserve=64), Conn()
        >>> reserve.waiting(conn)
        >>> reserve.accepted(descriptor=100, limit=1024), reserve.short
        (False, False)
        >>> reserve.accepted(descriptor=970, limit=1024)
        hurried
        True
        >>> reserve.arrived(conn); reserve.short
        False
    """

    def __init__(
        self,
        reserve: int = limits.DESCRIPTOR_RESERVE,
        head_timeout_s: float = limits.HEAD_TIMEOUT_WHEN_SHORT_S,
        say_every_s: float = 60.0,
    ) -> None:
        self.reserve = reserve
        self.head_timeout_s = head_timeout_s  # a request head's deadline while short
        self.short = False
        self.say_every_s = say_every_s
        self._said_at: float | None = None
        self._waiting: dict[HeadWait, None] = {}  # a dict: ordered, oldest first

    def waiting(self, conn: HeadWait) -> None:
        """``conn`` waits for a request head (from its start, or a later request's first byte)."""
        self._waiting[conn] = None

    def arrived(self, conn: HeadWait) -> None:
        """``conn``'s head arrived, or the connection ended; with no head awaited, not short."""
        self._waiting.pop(conn, None)
        if not self._waiting:
            self.short = False

    def accepted(self, descriptor: int | None, limit: int | None) -> bool:
        """A connection was accepted as ``descriptor``; True if that makes the server short, and
        then every head awaited is hurried (each connection's ``hurry_head``)."""
        if self.short or descriptor is None or limit is None or descriptor < limit - self.reserve:
            return False
        self.short = True
        self._say(descriptor, limit)
        for conn in list(self._waiting):
            conn.hurry_head()
        return True

    def _say(self, descriptor: int, limit: int) -> None:
        now = time.monotonic()
        if self._said_at is not None and now - self._said_at < self.say_every_s:
            return
        self._said_at = now
        log.warning(
            "short of file descriptors (%d or more of %d in use, fewer than %d free): a request's "
            "line and headers now have %g s to arrive, so half-sent ones free theirs for new "
            "clients; said at most once a minute",
            descriptor + 1,
            limit,
            self.reserve,
            self.head_timeout_s,
        )


def descriptor_of(transport: asyncio.BaseTransport) -> int | None:
    """The descriptor number of a connection's socket; None for a transport without one."""
    sock = transport.get_extra_info("socket")
    try:
        return int(sock.fileno()) if sock is not None else None
    except (AttributeError, OSError, ValueError):
        return None
