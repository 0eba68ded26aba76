"""The limits a server puts on what its clients may ask, in one place.

``ServerLimits`` holds those a server's operator may set: each of its fields is a flag of
``labkit serve`` (its name, its type and its help come from the field: ``labkit.cli.serve``),
and the server reads each one by name from its config (``labkit.server.config``). A new
limit is a field here, and the code that keeps to it. The constants below it are fixed.
docs/protocol.md lists them all. Nothing here imports labkit, so the command line can show
them without loading the server.
"""

from dataclasses import dataclass, field
from typing import Any

MAX_BODY_BYTES = 2 * 1024 * 1024  # an HTTP request body; larger is a 413
HEAD_TIMEOUT_S = 10.0  # for an HTTP request's line and headers to arrive; later is a 408, and a close
MAX_FRAME_BYTES = 2 * 1024 * 1024  # a WebSocket frame; larger closes the socket (1009)
MAX_OUTPUT_TOKENS = 32_768  # the longest answer the simulated model writes
MAX_QUEUED_CREATES = 16  # creates waiting on one WebSocket connection
# The frames a key's WebSocket connections hold unused (waiting creates, steering input, injected
# or appended input), together: four connections' worth.
MAX_HELD_BYTES_PER_KEY = 64 * 1024 * 1024
MAX_UNREAD_BYTES = 1024 * 1024  # events a connection's client has not read; past it they are cut
MAX_TRACES = 10_000  # responses whose spans are kept (and finished ones' trace events, for the history)
# Finished responses' trace events one server keeps in memory for the trace stream's history, their
# JSON together (with --workers the shared file keeps them instead, --max-traces of them).
MAX_TRACE_HISTORY_BYTES = 32 * 1024 * 1024
WS_LIFETIME_S = 60 * 60  # how long a WebSocket connection may stay open
# File descriptors kept free for new clients; once fewer are left, the server is short of them.
DESCRIPTOR_RESERVE = 64
HEAD_TIMEOUT_WHEN_SHORT_S = 1.0  # for a request's head to arrive while the server is short; later, a 408

# Fixed: no flag sets these.
MAX_BODY_CHUNKS = 4096  # the chunks of an HTTP request body (each costs the parser ~15 µs); more is a 413
# The frames one WebSocket connection holds unused (waiting creates, steering input, injected or
# appended input), together (at least: ``ServerLimits.max_queued_bytes``).
MAX_QUEUED_BYTES = 16 * 1024 * 1024
# A refusal returns the input it refuses only if its JSON is at most this share of what a client may
# leave unread: the most refusals one event causes at once (a response's 16 injects, returned
# when it ends) then take at most half of it.
ECHO_SHARE_OF_UNREAD = 32
MAX_LANES = 32  # named lanes (``stream_id``) on one WebSocket connection
MAX_IN_FLIGHT = 16  # responses running at once on one WebSocket connection
MAX_PENDING_STEERS = 8  # steering inputs queued on one response, waiting to be committed
# The soft limit on open files ``labkit serve`` raises itself to, if the hard limit allows (most
# sessions start at 1,024): thousands of connections, and a bound on what half-sent requests hold
# (about 3 KB each, benchmarks/room_faults.py: some 25 MB at most).
OPEN_FILES_WANTED = 8192
# How long one call into a learner's connection cache may take (labkit serve --connection-cache);
# past it the call is stopped and the connection goes on with labkit's cache.
LEARNER_CALL_DEADLINE_S = 0.5
DB_BUSY_TIMEOUT_S = 2.0  # how long a statement waits for a lock on --db held elsewhere; past it, a 503


def limit_field(default: Any, help: str) -> Any:
    """A field of ``ServerLimits``: its default, and its flag's help. ``--help`` adds the default
    to it, except None, whose meaning the help says itself ("(default: no cap)")."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServerLimits:
    """What one server allows its clients (docs/protocol.md, "Limits"); None is no cap.

    Each field is the ``labkit serve`` flag named after it, a trailing ``_s`` (seconds) left
    off: ``max_body_bytes`` is ``--max-body-bytes N``, ``head_timeout_s`` is ``--head-timeout
    SECONDS``. An int is a count, 1 or more; a float a positive number of seconds.

    >>> ServerLimits(max_frame_bytes=10 * 1024 * 1024).max_queued_bytes == 2 * 10 * 1024 * 1024
    True
    """

    ws_lifetime_s: float = limit_field(WS_LIFETIME_S, "how long a WebSocket connection may stay open")
    max_body_bytes: int = limit_field(MAX_BODY_BYTES, "largest HTTP request body; a larger one is a 413")
    head_timeout_s: float = limit_field(
        HEAD_TIMEOUT_S,
        "how long an HTTP request's line and headers may take to arrive; later is a 408 and a close",
    )
    max_frame_bytes: int = limit_field(  # enforced by uvicorn (ws_max_size); sizes the queue too
        MAX_FRAME_BYTES, "largest WebSocket frame; a larger one closes the socket with code 1009"
    )
    max_output_tokens: int = limit_field(
        MAX_OUTPUT_TOKENS, "the longest answer the simulated model writes, whatever the request asks for"
    )
    max_queued_creates: int = limit_field(
        MAX_QUEUED_CREATES,
        "creates waiting on one WebSocket connection; more are refused (websocket_queue_full)",
    )
    max_unread_bytes: int = limit_field(
        MAX_UNREAD_BYTES,
        "events a client may leave unread, per WebSocket connection or SSE stream; past it its "
        "responses are cut (WebSocket close 1008, SSE response.failed client_too_slow)",
    )
    max_traces: int = limit_field(
        MAX_TRACES,
        "responses whose spans are kept for /v1/labkit/traces, and for the history of its stream",
    )
    max_trace_history_bytes: int = limit_field(
        MAX_TRACE_HISTORY_BYTES,
        "finished responses' trace events one server keeps in memory for the history of "
        "/v1/labkit/traces/stream, their JSON together; the oldest go first (with --workers the "
        "database file keeps --max-traces of them instead)",
    )
    descriptor_reserve: int = limit_field(
        DESCRIPTOR_RESERVE,
        "file descriptors kept free for new clients; once fewer are free, a request's line and headers "
        "must arrive within the head timeout when short",
    )
    head_timeout_when_short_s: float = limit_field(
        HEAD_TIMEOUT_WHEN_SHORT_S,
        "how long an HTTP request's line and headers may take to arrive while fewer file descriptors "
        "than the descriptor reserve are free; later is a 408 and a close",
    )
    max_connections_per_key: int | None = limit_field(
        None, "open WebSocket connections per key; more are refused with 429 (default: no cap)"
    )
    max_requests_per_key: int | None = limit_field(
        None,
        "requests in flight per key (HTTP requests and WebSocket responses); more are a 429 "
        "(default: no cap)",
    )
    max_held_bytes_per_key: int = limit_field(
        MAX_HELD_BYTES_PER_KEY,
        "bytes of frames a key's WebSocket connections hold unused, together (creates waiting, "
        "steering input not yet committed, injected or appended input not yet taken); past it a "
        "frame is refused (websocket_queue_full, or response.steer.failed too_many_pending_steers)",
    )
    max_slots_per_key: int | None = limit_field(
        None,
        "engine slots one key may hold on a replica at once; its other responses wait while the "
        "rest of the room is served (default: a quarter of the profile's engine.max_concurrent where "
        "keys are required, no cap otherwise)",
    )

    @property
    def max_queued_bytes(self) -> int:
        """The frames one connection holds unused, together (creates waiting, steering input,
        injected or appended input): room for two of the largest frames, and at least
        ``MAX_QUEUED_BYTES``."""
        return max(2 * self.max_frame_bytes, MAX_QUEUED_BYTES)

    @property
    def max_echo_bytes(self) -> int:
        """The most a refusal returns of the input it refuses, as JSON (``labkit.api.echo``): a
        share of what a client may leave unread, so no refusal can cut a connection by itself.

        >>> ServerLimits().max_echo_bytes
        32768
        """
        return self.max_unread_bytes // ECHO_SHARE_OF_UNREAD
