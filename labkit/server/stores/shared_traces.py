"""The traces of ``labkit serve --workers N``: every worker's finished responses, and its running
appended rollouts' spans so far, for every worker.

With one process, a finished response's trace event is kept in memory (``RecentTraces``) and
handed to the subscribers by ``TraceFeed``. With N workers, a ``GET /v1/labkit/traces`` or a
subscriber reaches one worker while the responses it wants finish on any of them. So each worker
appends every finished response's trace event to one table of the room's SQLite file, and every
worker that has subscribers reads the new rows a few times a second and hands each to its own
subscribers::

    worker 1 ──append──▶ traces (seq, room, response_id, owner, event) ◀──read new rows── worker 2
    worker 2 ──append──▶                                                ──▶ its subscribers

- Every finished response: its row is written whether anyone watches or not, so
  ``GET /v1/labkit/traces`` of a finished response works on every worker (``TraceStore`` looks
  here for a response another worker ran), and a new subscriber can ask for the room's history.
- Once each: a subscriber's history is the rows up to the last one at the moment it subscribes
  (``Subscriber.after``), its live events the rows after it, and its worker reads each row once,
  in ``seq`` order.
- In order per key: ``seq`` grows in commit order (SQLite runs one writer at a time), and a
  response's row is committed before its terminal event can reach its client (the event is
  queued, not sent, when the row is written), so the key's next response, on whichever worker,
  comes later.
- The same order on every worker: each reads the one table in ``seq`` order.
- A running appended rollout's spans on every worker: its client reads them at each pause
  (``GET /v1/labkit/traces``), and that request may reach any worker. So its worker writes the
  spans added since its last write to a second table, ``running_traces`` (a row each time,
  keyed by the index of its first span: a write costs one segment's spans, not the whole
  rollout's), when it opens and at each pause, committed before the pause's event can reach
  the client (the event is queued, not sent, when the row is written). ``SharedTraces.spans``
  reads a finished response's row, else the running one's rows, in one statement (one
  snapshot), so a response that finishes meanwhile is found either way. The finished row
  supersedes them: they are deleted once it is committed. They are never streamed: the trace
  stream carries finished responses, once each. A plain response writes nothing here: its
  client asks for its spans once it has finished.

The traces table keeps the last ``capacity`` rows, of every room together (pruned every
``PRUNE_EVERY`` appends); ``room`` (one value per ``labkit serve``) keeps two servers given the
same file apart. Live traces reach another worker's subscribers within ``POLL_S``. The running
table keeps the rows of at most ``capacity`` responses and ``RUNNING_MAX_BYTES`` of spans, of every
room together: the responses written to least recently go first, whole (a rollout whose client
left never finishes; pruned every ``RUNNING_PRUNE_EVERY`` writes of a worker). A running
response whose first rows went meanwhile is read as none.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

from labkit.limits import MAX_TRACES
from labkit.server.stores.database import Database
from labkit.server.stores.trace_stream import Subscriber, TraceFeed
from labkit.server.stores.traces import BATCH, Row, event_json

POLL_S = 0.05  # how often a worker with subscribers reads the rows the others appended
PRUNE_EVERY = 256  # appends between two prunes of the oldest rows
# Its statements run on the event loop (reads never wait in WAL mode; a write waits this long at
# most for a lock held elsewhere, then its trace is dropped): a locked file stalls nobody long.
SHARED_TRACES_BUSY_TIMEOUT_S = 0.1
# The running rollouts' spans the file keeps, together: a rollout's are tens of KB (fix-failing-test's
# 19 segments, some 40 KB), and an abandoned one's stay until they are pruned.
RUNNING_MAX_BYTES = 16 * 1024 * 1024
# Writes between two prunes of the running rows: a prune reads every row (about 1 ms a thousand),
# and it runs on the event loop.
RUNNING_PRUNE_EVERY = 32

SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    room TEXT NOT NULL,
    response_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    event TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_by_response ON traces (response_id);
CREATE TABLE IF NOT EXISTS running_traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    room TEXT NOT NULL,
    response_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    first INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    spans TEXT NOT NULL,
    UNIQUE (room, response_id, first)
);
"""
FINISHED = -1  # in ``SPANS_OF``: the finished event's row, ahead of any running row (first >= 0)
# A response's spans, whichever worker ran it: its finished event, else its running rows in order.
SPANS_OF = """
SELECT -1, event FROM traces WHERE response_id = ? AND owner = ? AND room = ?
UNION ALL
SELECT first, spans FROM running_traces WHERE response_id = ? AND owner = ? AND room = ?
ORDER BY 1
"""
# The running responses past the ``capacity`` written to last, or past ``max_bytes`` of spans
# counted from the one written to last: all their rows.
PRUNE_RUNNING = """
DELETE FROM running_traces WHERE (room, response_id) IN (
    SELECT room, response_id FROM (
        SELECT room, response_id, ROW_NUMBER() OVER newest AS n, SUM(kept) OVER newest AS total
        FROM (
            SELECT room, response_id, MAX(seq) AS last, SUM(bytes) AS kept
            FROM running_traces GROUP BY room, response_id
        ) WINDOW newest AS (ORDER BY last DESC)
    ) WHERE n > ? OR total > ?
)
"""


def create_table(database: Database) -> None:
    """Create the tables (once, before the workers open the file)."""
    with database.lock:
        database.conn.executescript(SCHEMA)


class SharedTraces:
    """One room's finished trace events in the shared SQLite file (a ``FinishedTraces``), and its
    running rollouts' spans so far.

    >>> db = Database(":memory:"); traces = SharedTraces(db, room="r1")
    >>> traces.share_running("key_a", "resp_1", 0, [{"stage": "auth"}])
    >>> traces.share_running("key_a", "resp_1", 1, [{"stage": "decode"}])  # the spans added since
    >>> traces.spans("key_a", "resp_1"), traces.after(0)  # running: readable, never streamed
    ([{'stage': 'auth'}, {'stage': 'decode'}], [])
    >>> traces.append("key_a", {"type": "trace", "response_id": "resp_1", "spans": []})
    >>> [row.seq for row in traces.after(0)], traces.spans("key_a", "resp_1")  # finished: first
    ([1], [])
    >>> traces.finished("resp_1")  # its running row goes
    >>> traces.spans("key_b", "resp_1") is None, SharedTraces(db, room="r2").after(0)
    (True, [])
    """

    def __init__(
        self,
        database: Database,
        room: str,
        capacity: int = MAX_TRACES,
        running_max_bytes: int = RUNNING_MAX_BYTES,
    ) -> None:
        self._db, self._lock = database.conn, database.lock
        self.room = room
        self.capacity = capacity
        self.running_max_bytes = running_max_bytes
        self._appended = 0
        self._shared_running = 0
        create_table(database)

    def append(self, owner: str, event: dict[str, Any]) -> None:
        """Write one finished response's trace event; committed when this returns."""
        row = (self.room, event["response_id"], owner, event_json(event))
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO traces (room, response_id, owner, event) VALUES (?, ?, ?, ?)", row
            )
            self._appended += 1
            if self._appended % PRUNE_EVERY == 0:
                assert cur.lastrowid is not None
                self._db.execute("DELETE FROM traces WHERE seq <= ?", (cur.lastrowid - self.capacity,))

    def last(self) -> int:
        """The ``seq`` of the newest row (0 for none): where a new subscriber's history ends."""
        with self._lock:
            return self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM traces").fetchone()[0]

    def after(
        self, seq: int, limit: int = BATCH, *, upto: int | None = None, owner: str | None = None
    ) -> list[Row]:
        """This room's rows after ``seq`` (and up to ``upto``), oldest first; ``owner``'s only, if given."""
        query = "SELECT seq, owner, event FROM traces WHERE seq > ? AND seq <= ? AND room = ?"
        params: list[Any] = [seq, upto if upto is not None else 2**63 - 1, self.room]
        if owner is not None:
            query += " AND owner = ?"
            params.append(owner)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY seq LIMIT ?", (*params, limit)).fetchall()
        return [Row(*row) for row in rows]

    def spans(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The spans of ``owner``'s response, whichever worker ran it: finished, else so far
        (a running rollout's, as of its latest pause); None for neither.

        >>> traces = SharedTraces(Database(":memory:"), room="r1")
        >>> traces.share_running("key_a", "resp_2", 3, [{"stage": "decode"}])  # its first rows pruned
        >>> traces.spans("key_a", "resp_2") is None
        True
        """
        key = (response_id, owner, self.room)
        with self._lock:
            rows = self._db.execute(SPANS_OF, key + key).fetchall()
        if not rows:
            return None
        if rows[0][0] == FINISHED:
            return json.loads(rows[0][1])["spans"]
        spans: list[dict[str, Any]] = []
        for first, text in rows:
            if first != len(spans):
                return None  # rows before these were pruned: a part is not the whole
            spans += json.loads(text)
        return spans

    def share_running(self, owner: str, response_id: str, first: int, spans: list[dict[str, Any]]) -> None:
        """Write the spans a running response added since its last write (``first``: the index of
        the first of them in its trace); committed when this returns. Writing from the same
        ``first`` again replaces that row."""
        text = json.dumps(spans, separators=(",", ":"))  # ASCII: its length is its size in bytes
        row = (self.room, response_id, owner, first, len(text), text)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO running_traces (room, response_id, owner, first, bytes, spans)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
            self._shared_running += 1
            if self._shared_running % RUNNING_PRUNE_EVERY == 0:
                self._db.execute(PRUNE_RUNNING, (self.capacity, self.running_max_bytes))

    def finished(self, response_id: str) -> None:
        """Drop a response's running rows: its finished event (``append``, committed first) has them."""
        with self._lock:
            self._db.execute(
                "DELETE FROM running_traces WHERE room = ? AND response_id = ?", (self.room, response_id)
            )


class SharedFeed(TraceFeed):
    """A worker's subscribers, fed from the room's table rather than straight from its responses."""

    def __init__(self, shared: SharedTraces) -> None:
        super().__init__()
        self.shared = shared
        self._read_to = 0  # the last row this worker has handed out
        self._reader: asyncio.Task[None] | None = None

    def subscribe(self, owner: str, *, sees_everyone: bool = False, after: int = 0) -> Subscriber:
        """``after``: the table's last row when it subscribed (``SharedTraces.last``), read before
        this call: it is handed every row after that one."""
        subscriber = super().subscribe(owner, sees_everyone=sees_everyone, after=after)
        if not self.closed and (self._reader is None or self._reader.done()):
            self._read_to = after
            self._reader = asyncio.get_running_loop().create_task(self._read())
        return subscriber

    def publish(self, owner: str, trace: dict[str, Any]) -> None:
        """Nothing to hand out here: the row ``TraceStore.finish`` appended reaches this worker's
        subscribers through its reader, as every other worker's do, so all see one order."""

    def close(self) -> None:
        super().close()
        if self._reader is not None:
            self._reader.cancel()

    async def _read(self) -> None:
        """Hand out new rows while this worker has subscribers; a full batch is followed at once."""
        while self.subscribers and not self.closed:
            try:
                rows = self.shared.after(self._read_to)
            except sqlite3.OperationalError:  # the file stayed locked: read again next time
                rows = []
            for row in rows:
                self._hand_out(row)
                self._read_to = row.seq
            await asyncio.sleep(0 if len(rows) == BATCH else POLL_S)

    def _hand_out(self, row: Row) -> None:
        # A subscriber has the rows up to its ``after`` in its history (if it asked for it), never
        # live; a row nobody here may see is not even parsed.
        allowed = [s for s in self.subscribers if row.seq > s.after and s.may_see(row.owner)]
        if allowed:
            self.deliver(row.owner, json.loads(row.event), allowed)
