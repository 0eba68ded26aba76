"""A client that shut its side of the connection after its request: waiting, or gone?

TCP cannot tell the two apart when they happen: a client that calls ``shutdown(SHUT_WR)`` ("that
is all", and it reads on) and one whose socket closed (its process ended, a notebook kernel
crashed) both send a FIN. The difference shows only once data reaches them: an open socket takes
it, a closed one answers with a reset. An answer that takes a while (a long JSON answer, an SSE
stream waiting for an engine slot, a trace subscription between events) would otherwise be made
for nobody, holding its engine slot and its key's caps all along.

So when the answer is still pending ``PROBE_AFTER_S`` after the FIN (a quick answer goes out
untouched), the server sends one probe that HTTP allows at that point and that means nothing to
the client: an interim ``102 Processing`` before the answer's head (RFC 9110 §15.2: a client
parses any 1xx it gets before the final answer), or a comment line inside an event stream
(every ``text/event-stream`` body labkit sends is written a whole event or comment a chunk, so a
comment between two chunks is one more comment). A client that has gone answers with a reset,
which shows as the socket's pending error (``SO_ERROR``); the connection is then dropped, and
uvicorn tells the app that its client disconnected, which cancels what runs for it
(``labkit.server.http.unless_gone``; Starlette's ``StreamingResponse`` itself). ``TrackedHTTP``
(``labkit.server.edge.network``) runs this for every connection.

    >>> conn = h11.Connection(h11.SERVER)
    >>> conn.receive_data(b"GET / HTTP/1.1\\r\\nHost: labkit\\r\\n\\r\\n")
    >>> type(conn.next_event()).__name__, type(conn.next_event()).__name__
    ('Request', 'EndOfMessage')
    >>> probe_bytes(conn, event_stream=False)  # before the answer's head
    b'HTTP/1.1 102 Processing\\r\\n\\r\\n'
"""

from __future__ import annotations

import asyncio
import socket

import h11

PROBE_AFTER_S = 0.5  # how long after the FIN an answer may take before the client is probed
CHECK_EVERY_S = 0.05  # how often the socket is checked for the reset a closed client answers with
CHECK_FOR_S = 1.0  # how long: a client still there after that has taken the probe
CHECKS = round(CHECK_FOR_S / CHECK_EVERY_S)
# 102 Processing: "the request was received and is being worked on"
PROBE_HEAD = h11.InformationalResponse(status_code=102, headers=[], reason=b"Processing")
PROBE_COMMENT = b": still there?\n\n"  # an SSE comment, which every client skips


def probe_bytes(conn: h11.Connection, *, event_stream: bool) -> bytes | None:
    """What may go to the client now, through ``conn``, without changing its answer: a 102 before
    the answer's head (never to an HTTP/1.0 client, which knows no 1xx), a comment in an event
    stream; None where nothing may (a JSON answer on its way: it ends by itself)."""
    if conn.our_state is h11.SEND_RESPONSE and conn.their_http_version not in (None, b"1.0"):
        return conn.send(PROBE_HEAD)
    if conn.our_state is h11.SEND_BODY and event_stream:
        return conn.send(h11.Data(data=PROBE_COMMENT))
    return None


def reset_by_peer(transport: asyncio.BaseTransport) -> bool:
    """Whether the client answered with a reset: the socket's pending error (read once, it clears;
    the connection is dropped right after)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
    except OSError:
        return True


def watch_for_reset(transport: asyncio.WriteTransport, checks: int = CHECKS) -> None:
    """Check the socket every ``CHECK_EVERY_S``, ``checks`` times, and drop the connection
    (``abort``) once the client has answered the probe with a reset."""
    if transport.is_closing():
        return
    if reset_by_peer(transport):
        transport.abort()  # uvicorn's connection_lost: the app hears http.disconnect
        return
    if checks > 1:
        asyncio.get_running_loop().call_later(CHECK_EVERY_S, watch_for_reset, transport, checks - 1)
