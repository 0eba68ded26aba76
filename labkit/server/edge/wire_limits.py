"""What one HTTP connection may cost the server before its request reaches the app.

uvicorn's h11 protocol reads what a client sends (``labkit.server.edge.network.TrackedHTTP`` wraps
it). Left alone, it would:

- wait forever for a request head that never ends, or never starts (a client that connects and
  sends a line, or nothing): so a head must arrive within ``limits.HEAD_TIMEOUT_S``
  (``labkit serve --head-timeout``), else a 408 and the connection closes;
- serve a request carrying both ``Content-Length`` and ``Transfer-Encoding`` and keep the
  connection open, so a second request hidden in its body would be served too (RFC 9112
  §6.1: close after it): ``BoundedH11`` refuses it with a 400 and closes;
- parse a body sent as 700,000 one-byte chunks, each an h11 event of about 15 µs, in one go on
  the event loop: past ``limits.MAX_BODY_CHUNKS`` chunks the body is refused (413) and the
  connection closed, so one request costs at most a few tens of milliseconds of parsing;
- and, when the process is out of file descriptors, let asyncio's accept loop try (and log,
  with a traceback) up to its backlog, 2,048 times, every second: ``ListeningSocket`` tries
  once a retry, and the shortage is logged once a minute at most (``handle_accept_errors``)
  while the connections already open go on being served.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from typing import Any

import h11

from labkit.api.errors import APIError, invalid_request

log = logging.getLogger("uvicorn.error")  # the server's own log, as uvicorn configures it

# What accept() says when the process or the system has no descriptor (or buffer) left.
OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_FAILED = "socket.accept() out of system resource"  # asyncio's message for it
QUIET_S = 0.5  # after a failed accept, no other is tried for this long (asyncio retries after 1 s)


def head_timeout(seconds: float) -> APIError:
    return APIError(
        408,
        f"The request's line and headers did not arrive within {seconds:g} s.",
        code="request_timeout",
    )


def ambiguous_framing() -> APIError:
    return invalid_request(
        "A request may carry Content-Length or Transfer-Encoding, not both; the connection is closed."
    )


def too_many_chunks(limit: int) -> APIError:
    return APIError(
        413,
        f"The request body came in more than {limit} chunks, this server's limit; send it in "
        "fewer, larger chunks, or with a Content-Length.",
        code="too_many_body_chunks",
    )


class BoundedH11(h11.Connection):
    """h11's server side, refusing what would cost more than one request's share (see above).

    A refusal is a ``RemoteProtocolError``, which uvicorn answers (through ``TrackedHTTP``) and
    then closes the connection; ``refusal`` is the answer.

        >>> conn = BoundedH11(h11.SERVER, max_body_chunks=1)
        >>> conn.receive_data(b"POST / HTTP/1.1\\r\\nHost: a\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n")
        >>> conn.receive_data(b"1\\r\\na\\r\\n1\\r\\nb\\r\\n")
        >>> type(conn.next_event()).__name__, type(conn.next_event()).__name__
        ('Request', 'Data')
        >>> conn.next_event()
        Traceback (most recent call last):
        ...
        h11._util.RemoteProtocolError: more than 1 body chunks
    """

    def __init__(
        self, our_role: Any, max_incomplete_event_size: int = 16 * 1024, *, max_body_chunks: int
    ) -> None:
        super().__init__(our_role, max_incomplete_event_size)
        self.max_body_chunks = max_body_chunks
        self.refusal: APIError | None = None  # why the last RemoteProtocolError of ours was raised
        self._chunks = 0  # Data events of the request being read
        self.event_stream = False  # the answer being sent is text/event-stream (SSE)

    def next_event(self) -> Any:
        event = super().next_event()
        if isinstance(event, h11.Request):
            self._chunks = 0
            names = {name for name, _ in event.headers}  # h11 lowercases them
            if b"content-length" in names and b"transfer-encoding" in names:
                self.refusal = ambiguous_framing()
                raise h11.RemoteProtocolError("both Content-Length and Transfer-Encoding")
        elif isinstance(event, h11.Data):
            self._chunks += 1
            if self._chunks > self.max_body_chunks:
                self.refusal = too_many_chunks(self.max_body_chunks)
                raise h11.RemoteProtocolError(f"more than {self.max_body_chunks} body chunks")
        return event

    def send(self, event: Any) -> bytes | None:
        """h11's ``send``, noting whether an answer's body is an event stream
        (``labkit.server.edge.half_close`` may put a comment between its events)."""
        if isinstance(event, h11.Response):
            self.event_stream = any(
                name == b"content-type" and value.split(b";")[0].strip() == b"text/event-stream"
                for name, value in event.headers
            )
        return super().send(event)


class ListeningSocket(socket.socket):
    """A listening socket whose ``accept``, once it failed for want of a descriptor, reports
    nothing to accept for ``QUIET_S``: asyncio's accept loop then stops at the first failure
    instead of trying its whole backlog (2,048 accepts, each logged with a traceback), and
    tries again when it retries, a second later. Connections meanwhile wait in the listen queue.
    """

    _quiet_until = 0.0

    def accept(self) -> tuple[socket.socket, Any]:
        if time.monotonic() < self._quiet_until:
            raise BlockingIOError(errno.EAGAIN, "out of descriptors: accepting again shortly")
        try:
            return super().accept()
        except OSError as e:
            if e.errno in OUT_OF_RESOURCES:
                self._quiet_until = time.monotonic() + QUIET_S
            raise


class DescriptorShortage:
    """Says that new connections cannot be accepted: once, and again at most every ``every_s``
    while it lasts, however often asyncio reports a failed accept (once a second)."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self.said_at: float | None = None

    def noticed(self, error: OSError) -> None:
        now = time.monotonic()
        if self.said_at is None or now - self.said_at >= self.every_s:
            self.said_at = now
            log.warning(
                "out of file descriptors (%s): new connections wait in the listen queue while the "
                "open ones are served (one without a request head is closed at its head timeout); "
                "said at most once a minute",
                error.strerror or error,
            )


SHORTAGE = DescriptorShortage()


def handle_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Route asyncio's report of a failed accept (out of descriptors) to ``SHORTAGE``, which says
    it once; every other report goes where it went before."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if context.get("message") == ACCEPT_FAILED and isinstance(error, OSError):
            SHORTAGE.noticed(error)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
