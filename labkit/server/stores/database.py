"""One SQLite file (WAL), opened by each of its users, whose statements run beside the event loop.

The response store, the billing ledger and (with ``--workers``) the shared traces each open the
file as a ``Database`` of their own: one connection, worked from one thread of its own
(``await database.run(work)``), so a file that another process has locked, or a slow or full
disk, holds up only the requests that need the file, never the event loop (``/healthz``, a
``store: false`` create, the other clients' streams).

Reads have a connection and a thread of their own besides (``await database.read(work)``): in
WAL mode a reader never waits for a writer, so a read queued behind a write that waits for the
lock would wait for nothing. With another process holding the write lock, a stored response is
still read at once (``GET /v1/responses/{id}``, its input items, a ``previous_response_id``
follow-up) while a write waits and, past its wait, is a 503. A read sees one snapshot of the
file from its first statement to its last. (``:memory:`` is a database of one connection's own,
so there reads share the one connection, and nothing else can lock it.)

A statement waits for a lock at most the database's ``busy_timeout_s``, counted from the
moment it was asked for (its wait behind earlier statements included); past it, or when the
file cannot be written (its disk is full, an I/O error), it raises ``DatabaseUnavailable``, a
503 the client may retry.

    >>> import asyncio
    >>> db = Database(":memory:")
    >>> asyncio.run(db.run(lambda conn: conn.execute("SELECT 1 + 1").fetchone()[0]))
    2
    >>> asyncio.run(db.read(lambda conn: conn.execute("SELECT 2 + 2").fetchone()[0]))
    4
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from labkit import limits
from labkit.api.errors import APIError, database_unavailable

R = TypeVar("R")

# What SQLite says when another connection holds the lock it needs.
LOCKED = ("database is locked", "database table is locked", "database schema is locked")


class DatabaseUnavailable(APIError):
    """The file stayed locked past the wait, or cannot be written: a 503 with a retry hint."""

    def __init__(self, cause: str, *, locked: bool) -> None:
        err = database_unavailable(cause, locked=locked)
        super().__init__(
            err.status, err.message, type=err.type, code=err.code, headers=err.headers
        )
        self.cause, self.locked = cause, locked


def unavailable(error: sqlite3.Error) -> DatabaseUnavailable | None:
    """The ``DatabaseUnavailable`` an error of SQLite's means, None for anything else (a bug).

    >>> unavailable(sqlite3.OperationalError("database is locked")).locked
    True
    >>> unavailable(sqlite3.OperationalError("database or disk is full")).cause
    'database or disk is full'
    >>> unavailable(sqlite3.IntegrityError("UNIQUE constraint failed")) is None
    True
    """
    text = str(error)
    if isinstance(error, sqlite3.OperationalError) and text in LOCKED:
        return DatabaseUnavailable(text, locked=True)
    if isinstance(error, sqlite3.OperationalError | sqlite3.DatabaseError) and not isinstance(
        error, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError
    ):
        return DatabaseUnavailable(text, locked=False)  # full, I/O error, read-only, corrupt
    return None


class Database:
    def __init__(self, path: str | Path, busy_timeout_s: float = limits.DB_BUSY_TIMEOUT_S) -> None:
        self.path = str(path)
        self.busy_timeout_s = busy_timeout_s
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.conn = self._connect()
        self.lock = threading.Lock()  # statements from the thread and from direct callers take turns
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self._writing = _Lane(self.conn, self.lock, ThreadPoolExecutor(1, thread_name_prefix="labkit-db"))
        self._reading = self._read_lane()  # opened now: a server out of descriptors could not later
        self._closed = False

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=self.busy_timeout_s
        )

    async def run(self, work: Callable[[sqlite3.Connection], R]) -> R:
        """``work(conn)`` on this database's thread; ``DatabaseUnavailable`` if the file stayed
        locked past ``busy_timeout_s`` from now, or cannot be written."""
        return await self._on(self._writing, work, snapshot=False)

    async def read(self, work: Callable[[sqlite3.Connection], R]) -> R:
        """``work(conn)``, which only reads, on the read connection's thread, in one snapshot: never
        behind a write waiting for the lock. ``DatabaseUnavailable`` as for ``run``.

            stored = await database.read(lambda conn: conn.execute("SELECT body FROM t").fetchall())
        """
        return await self._on(self._reading, work, snapshot=self._reading is not self._writing)

    def _read_lane(self) -> _Lane:
        if self.path == ":memory:":  # another connection would be another, empty database
            return self._writing
        reader = self._connect()
        reader.execute("PRAGMA query_only=ON")  # a read must never write
        reader.execute("PRAGMA schema_version")  # opens the WAL's files now, as the writer has
        return _Lane(reader, threading.Lock(), ThreadPoolExecutor(1, thread_name_prefix="labkit-db-read"))

    async def _on(self, lane: _Lane, work: Callable[[sqlite3.Connection], R], *, snapshot: bool) -> R:
        asked = time.monotonic()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(lane.thread, self._run, lane, work, asked, snapshot)

    def _run(self, lane: _Lane, work: Callable[[sqlite3.Connection], R], asked: float, snapshot: bool) -> R:
        left = self.busy_timeout_s - (time.monotonic() - asked)
        if left <= 0:  # waited its whole wait behind statements that found the file locked
            raise DatabaseUnavailable(LOCKED[0], locked=True)
        with lane.lock:
            try:
                lane.conn.execute(f"PRAGMA busy_timeout = {max(1, int(left * 1000))}")
                if not snapshot:
                    return work(lane.conn)
                lane.conn.execute("BEGIN")  # one snapshot: a chain read whole, not across a commit
                try:
                    return work(lane.conn)
                finally:
                    if lane.conn.in_transaction:  # an error may have ended it already
                        lane.conn.execute("COMMIT")
            except sqlite3.Error as e:
                refusal = unavailable(e)
                if refusal is None:
                    raise
                raise refusal from None

    def close(self) -> None:
        """Close the file once the statements running now (if any) have ended: at most their wait."""
        if self._closed:
            return
        self._closed = True
        for lane in {self._reading, self._writing}:
            lane.thread.shutdown(wait=True, cancel_futures=True)
            with lane.lock:
                lane.conn.close()


@dataclass(frozen=True, eq=False)  # hashed by identity: each lane is one connection
class _Lane:
    """A connection to the file and the one thread its statements run on."""

    conn: sqlite3.Connection
    lock: threading.Lock
    thread: ThreadPoolExecutor
