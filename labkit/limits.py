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
MAX_UNREAD_BYTES = 1024 * 1024  # events a connection's client has not read; past it they are cut
MAX_TRACES = 10_000  # responses whose spans are kept in memory
WS_LIFETIME_S = 60 * 60  # how long a WebSocket connection may stay open

# Fixed: no flag sets these.
MAX_BODY_CHUNKS = 4096  # the chunks of an HTTP request body (each costs the parser ~15 µs); more is a 413
MAX_QUEUED_BYTES = 16 * 1024 * 1024  # the frames of a connection's waiting creates, together (at least)
MAX_LANES = 32  # named lanes (``stream_id``) on one WebSocket connection
MAX_IN_FLIGHT = 16  # responses running at once on one WebSocket connection
MAX_PENDING_STEERS = 8  # steering inputs queued on one response, waiting to be committed
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
        MAX_TRACES, "responses whose spans are kept in memory for /v1/labkit/traces"
    )
    max_connections_per_key: int | None = limit_field(
        None, "open WebSocket connections per key; more are refused with 429 (default: no cap)"
    )
    max_requests_per_key: int | None = limit_field(
        None,
        "requests in flight per key (HTTP requests and WebSocket responses); more are a 429 "
        "(default: no cap)",
    )
    max_slots_per_key: int | None = limit_field(
        None,
        "engine slots one key may hold on a replica at once; its other responses wait while the "
        "rest of the room is served (default: a quarter of the profile's engine.max_concurrent where "
        "keys are required, no cap otherwise)",
    )

    @property
    def max_queued_bytes(self) -> int:
        """The frames a connection's waiting creates came in, together: room for two of the
        largest frames, and at least ``MAX_QUEUED_BYTES``."""
        return max(2 * self.max_frame_bytes, MAX_QUEUED_BYTES)
