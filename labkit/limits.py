"""The defaults of the limits a server puts on what its clients may ask, in one place.

Read by ``labkit serve`` (its flags' defaults) and by the server; docs/protocol.md lists
them. Nothing here imports anything, so the command line can show them without loading
the server.
"""

MAX_BODY_BYTES = 2 * 1024 * 1024  # an HTTP request body; larger is a 413
MAX_BODY_CHUNKS = 4096  # ... and the chunks it comes in (each costs the parser ~15 µs); more is a 413
HEAD_TIMEOUT_S = 10.0  # for an HTTP request's line and headers to arrive; later is a 408, and a close
MAX_FRAME_BYTES = 2 * 1024 * 1024  # a WebSocket frame; larger closes the socket (1009)
MAX_OUTPUT_TOKENS = 32_768  # the longest answer the simulated model writes
MAX_QUEUED_CREATES = 16  # creates waiting on one WebSocket connection
MAX_QUEUED_BYTES = 16 * 1024 * 1024  # ... and the frames they came in, together
MAX_UNREAD_BYTES = 1024 * 1024  # events a connection's client has not read; past it they are cut
MAX_TRACES = 10_000  # responses whose spans are kept in memory
WS_LIFETIME_S = 60 * 60  # how long a WebSocket connection may stay open
MAX_LANES = 32  # named lanes (``stream_id``) on one WebSocket connection
MAX_IN_FLIGHT = 16  # responses running at once on one WebSocket connection
MAX_PENDING_STEERS = 8  # steering inputs queued on one response, waiting to be committed
DB_BUSY_TIMEOUT_S = 2.0  # how long a statement waits for a lock on --db held elsewhere; past it, a 503
