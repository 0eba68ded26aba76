"""The traces of ``labkit serve --workers N``: every worker's finished responses, for every worker.

With one process, ``TraceFeed`` hands a finished response's trace to the subscribers in memory.
With N workers, a subscriber is connected to one worker while the responses it wants finish on
any of them. So each worker appends its finished responses' traces to one table of the room's
SQLite file, and every worker that has subscribers reads the new rows a few times a second and
hands each to its own subscribers::

    worker 1 ──append──▶ traces (seq, room, response_id, owner, event) ◀──read new rows── worker 2
    worker 2 ──append──▶                                                ──▶ its subscribers

- Once each: a subscriber starts after the last row at the moment it subscribes, and its worker
  reads each row once, in ``seq`` order.
- In order per key: ``seq`` grows in commit order (SQLite runs one writer at a time), and a
  response's row is committed before its terminal event can reach its client (the event is only
  queued when the row is written), so the key's next response, on whichever worker, comes later.
- The same order on every worker: each reads the one table in ``seq`` order.
- ``GET /v1/labkit/traces`` of a finished response works on every worker: ``TraceStore`` looks
  here for a response another worker ran.
- Nothing is written while nobody watches: each worker counts its subscribers per key (and
  instructors as ``EVERYONE``) in a second table, and a finishing response's trace is built and
  appended only if someone, on any worker, may see it. A subscriber counts before it is
  confirmed (``: subscribed``), so every response that finishes after that is written.

The table keeps the last ``capacity`` rows, of every room together; ``room`` (one value per
``labkit serve``) keeps two servers given the same file apart. Live traces reach another
worker's subscribers within ``POLL_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from labkit.limits import MAX_TRACES
from labkit.server.database import Database
from labkit.server.trace_stream import Subscriber, TraceFeed

POLL_S = 0.05  # how often a worker with subscribers reads the rows the others appended
BATCH = 256  # rows read at once: a burst larger than this is read over several polls
PRUNE_EVERY = 256  # appends between two prunes of the oldest rows
# Its statements run on the event loop (reads never wait in WAL mode; a write waits this long at
# most for a lock held elsewhere, then its trace is dropped): a locked file stalls nobody long.
SHARED_TRACES_BUSY_TIMEOUT_S = 0.1

SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    room TEXT NOT NULL,
    response_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    event TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_by_response ON traces (response_id);
CREATE TABLE IF NOT EXISTS trace_watchers (
    room TEXT NOT NULL,
    worker INTEGER NOT NULL,
    owner TEXT NOT NULL,
    subscribers INTEGER NOT NULL,
    PRIMARY KEY (room, worker, owner)
);
"""
EVERYONE = "*"  # the watchers' row of instructors' subscriptions (no key's owner id is "*")


def create_table(database: Database) -> None:
    """Create the table (once, before the workers open the file)."""
    with database.lock:
        database.conn.executescript(SCHEMA)


@dataclass(frozen=True)
class Row:
    seq: int
    owner: str
    event: str  # the trace event's JSON, parsed only for a worker whose subscribers want it


class SharedTraces:
    """One room's traces in the shared SQLite file.

    >>> db = Database(":memory:"); traces = SharedTraces(db, room="r1")
    >>> traces.append("key_a", {"type": "trace", "response_id": "resp_1", "spans": []})
    >>> [row.seq for row in traces.after(0)], traces.find("key_a", "resp_1")["response_id"]
    ([1], 'resp_1')
    >>> traces.find("key_b", "resp_1") is None, SharedTraces(db, room="r2").after(0)
    (True, [])
    """

    def __init__(self, database: Database, room: str, capacity: int = MAX_TRACES) -> None:
        self._db, self._lock = database.conn, database.lock
        self.room = room
        self.capacity = capacity
        self._appended = 0
        create_table(database)

    def append(self, owner: str, event: dict[str, Any]) -> None:
        """Write one finished response's trace event; committed when this returns."""
        row = (self.room, event["response_id"], owner, json.dumps(event))
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO traces (room, response_id, owner, event) VALUES (?, ?, ?, ?)", row
            )
            self._appended += 1
            if self._appended % PRUNE_EVERY == 0:
                assert cur.lastrowid is not None
                self._db.execute("DELETE FROM traces WHERE seq <= ?", (cur.lastrowid - self.capacity,))

    def last(self) -> int:
        """The ``seq`` of the newest row (0 for none): where a new subscriber starts."""
        with self._lock:
            return self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM traces").fetchone()[0]

    def after(self, seq: int, limit: int = BATCH) -> list[Row]:
        """This room's rows after ``seq``, oldest first."""
        query = "SELECT seq, owner, event FROM traces WHERE seq > ? AND room = ? ORDER BY seq LIMIT ?"
        with self._lock:
            rows = self._db.execute(query, (seq, self.room, limit)).fetchall()
        return [Row(*row) for row in rows]

    def watch(self, owner: str, change: int) -> None:
        """Count a subscription of ``owner``'s (``EVERYONE``: an instructor's) in or out, for this worker."""
        query = (
            "INSERT INTO trace_watchers VALUES (?, ?, ?, ?) ON CONFLICT (room, worker, owner) "
            "DO UPDATE SET subscribers = subscribers + excluded.subscribers"
        )
        with self._lock:
            self._db.execute(query, (self.room, os.getpid(), owner, change))

    def watched(self, owner: str) -> bool:
        """Whether a subscriber on any worker of the room may see ``owner``'s traces."""
        query = "SELECT 1 FROM trace_watchers WHERE room = ? AND owner IN (?, ?) AND subscribers > 0 LIMIT 1"
        with self._lock:
            return self._db.execute(query, (self.room, owner, EVERYONE)).fetchone() is not None

    def find(self, owner: str, response_id: str) -> dict[str, Any] | None:
        """The trace event of ``owner``'s finished response, whichever worker ran it."""
        query = "SELECT event FROM traces WHERE response_id = ? AND owner = ? AND room = ? LIMIT 1"
        with self._lock:
            found = self._db.execute(query, (response_id, owner, self.room)).fetchone()
        return json.loads(found[0]) if found else None


class SharedFeed(TraceFeed):
    """A worker's subscribers, fed from the room's table rather than straight from its responses."""

    def __init__(self, shared: SharedTraces) -> None:
        super().__init__()
        self.shared = shared
        self._read_to = 0  # the last row this worker has handed out
        self._reader: asyncio.Task[None] | None = None

    def subscribe(self, owner: str, *, sees_everyone: bool = False) -> Subscriber:
        subscriber = super().subscribe(owner, sees_everyone=sees_everyone)
        self.shared.watch(self._watching(subscriber), +1)  # first: from now on, traces are written
        subscriber.after = self.shared.last()
        if not self.closed and (self._reader is None or self._reader.done()):
            self._read_to = subscriber.after
            self._reader = asyncio.get_running_loop().create_task(self._read())
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self.subscribers:
            super().unsubscribe(subscriber)
            with contextlib.suppress(sqlite3.Error):  # a stream that outlived the file: nothing to count
                self.shared.watch(self._watching(subscriber), -1)

    @staticmethod
    def _watching(subscriber: Subscriber) -> str:
        return EVERYONE if subscriber.sees_everyone else subscriber.owner

    def wants(self, owner: str) -> bool:
        try:
            return self.shared.watched(owner)
        except sqlite3.OperationalError:
            return True  # unsure: write it, and let the readers decide

    def publish(self, owner: str, trace: dict[str, Any]) -> None:
        """Append to the table; every worker's reader hands it out, this worker's included."""
        # The response has finished and its answer is queued: a trace lost to a file locked
        # past sqlite3's busy timeout must not turn into an error after it.
        with contextlib.suppress(sqlite3.OperationalError):
            self.shared.append(owner, trace)

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
        # Subscribers that began after the row was written never see it: they start after it.
        allowed = [
            s for s in self.subscribers if row.seq > s.after and (s.owner == row.owner or s.sees_everyone)
        ]
        if allowed:
            self.deliver(row.owner, json.loads(row.event), allowed)
