"""One SQLite file (WAL), opened by each of its users, whose statements run beside the event loop.

The response store, the billing ledger and (with ``--workers``) the shared traces each open the
file as a ``Database`` of their own: one connection, worked from one thread of its own
(``await database.run(work)``), so a file that another process has locked, or a slow or full
disk, holds up only the requests that need the file, never the event loop (``/healthz``, a
``store: false`` create, the other clients' streams).

A statement waits for a lock at most the database's ``busy_timeout_s``, counted from the
moment it was asked for (its wait behind earlier statements included); past it, or when the
file cannot be written (its disk is full, an I/O error), it raises ``DatabaseUnavailable``, a
503 the client may retry.

    >>> import asyncio
    >>> db = Database(":memory:")
    >>> asyncio.run(db.run(lambda conn: conn.execute("SELECT 1 + 1").fetchone()[0]))
    2
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
        self.conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=busy_timeout_s
        )
        self.lock = threading.Lock()  # statements from the thread and from direct callers take turns
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labkit-db")
        self._closed = False

    async def run(self, work: Callable[[sqlite3.Connection], R]) -> R:
        """``work(conn)`` on this database's thread; ``DatabaseUnavailable`` if the file stayed
        locked past ``busy_timeout_s`` from now, or cannot be written."""
        asked = time.monotonic()
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._run, work, asked)

    def _run(self, work: Callable[[sqlite3.Connection], R], asked: float) -> R:
        left = self.busy_timeout_s - (time.monotonic() - asked)
        if left <= 0:  # waited its whole wait behind statements that found the file locked
            raise DatabaseUnavailable(LOCKED[0], locked=True)
        with self.lock:
            try:
                self.conn.execute(f"PRAGMA busy_timeout = {max(1, int(left * 1000))}")
                return work(self.conn)
            except sqlite3.Error as e:
                refusal = unavailable(e)
                if refusal is None:
                    raise
                raise refusal from None

    def close(self) -> None:
        """Close the file once the statement running now (if any) has ended: at most its wait."""
        if self._closed:
            return
        self._closed = True
        self._thread.shutdown(wait=True, cancel_futures=True)
        with self.lock:
            self.conn.close()
