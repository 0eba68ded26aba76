"""Billing: one ledger row per response, written blocking or overlapped with the next request.

The ledger is a SQLite table whose primary key is the response id, so a
response can never be billed twice. ``Billing.charge`` either waits for the
billing service (the modeled hop) and the write, or queues them for
background workers that run while the next request is served. The workers
send up to ``OVERLAPPED_CONCURRENCY`` charges to the service at once, as a real
client of a billing service would, and are drained when the server shuts down.

A write the ledger refuses (its file locked past ``LEDGER_BUSY_TIMEOUT_S``, its disk full)
never fails a response nor stops a worker: the charge is kept in memory (at most
``MAX_KEPT_CHARGES``), one log line says why, and the kept charges are written again every
``RETRY_S`` until the ledger takes them (one more line says so). Meanwhile new charges are
kept at once, behind them, without waiting for the file. At shutdown ``drain`` takes at most
``DRAIN_S``: whatever the ledger has not taken by then is counted in one log line as lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import astuple, dataclass

from labkit.engine import timing
from labkit.server.stores.database import Database

# Overlapped charges in flight at once. One at a time would cap a server at 1 / hop charges
# a second (100 at the 10 ms production-like hop), which a room of learners outruns: the queue
# would then grow for as long as the room runs, and take as long again to drain at shutdown.
OVERLAPPED_CONCURRENCY = 32
# A ledger write waits this long for a lock held elsewhere before its charge is kept for later:
# another worker's write holds it for a millisecond, and a blocking charge holds its answer back.
LEDGER_BUSY_TIMEOUT_S = 0.05
RETRY_S = 0.5  # how often kept charges are offered to the ledger again
DRAIN_S = 2.0  # the most a shutdown waits for the queued and kept charges to be written
MAX_KEPT_CHARGES = 100_000  # kept in memory while the ledger refuses them (a few hundred bytes each)

log = logging.getLogger("uvicorn.error")  # the server's own log, as uvicorn configures it

SCHEMA = """
CREATE TABLE IF NOT EXISTS billing (
    response_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    status TEXT NOT NULL,
    billed_at REAL NOT NULL
);
"""
INSERT = "INSERT OR IGNORE INTO billing VALUES (?, ?, ?, ?, ?, ?, ?, ?)"


@dataclass(frozen=True)
class Charge:
    response_id: str
    owner: str
    model: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    status: str
    billed_at: float = 0.0


def _row(charge: Charge) -> tuple[object, ...]:
    return (*astuple(charge)[:-1], charge.billed_at or time.time())


class Ledger:
    def __init__(self, database: Database) -> None:
        self.database = database
        self._db, self._lock = database.conn, database.lock
        with self._lock:
            self._db.executescript(SCHEMA)

    def record(self, charge: Charge) -> bool:
        """Write the charge now, on the caller's thread; False if this response was billed already."""
        with self._lock:
            cur = self._db.execute(INSERT, _row(charge))
        return cur.rowcount == 1

    async def write(self, charges: list[Charge]) -> None:
        """Write the charges in one transaction on the database's thread (a response billed
        already keeps its row); ``DatabaseUnavailable`` if the ledger refuses them."""
        rows = [_row(charge) for charge in charges]

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(INSERT, rows)
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise

        await self.database.run(insert)

    def count(self, response_id: str | None = None) -> int:
        with self._lock:
            if response_id is None:
                return self._db.execute("SELECT COUNT(*) FROM billing").fetchone()[0]
            query = "SELECT COUNT(*) FROM billing WHERE response_id = ?"
            return self._db.execute(query, (response_id,)).fetchone()[0]


class Billing:
    """Charges responses through the modeled billing service into the ledger."""

    def __init__(
        self,
        ledger: Ledger,
        hop_s: float,
        concurrency: int = OVERLAPPED_CONCURRENCY,
        *,
        retry_s: float = RETRY_S,
        max_kept: int = MAX_KEPT_CHARGES,
    ) -> None:
        self.ledger = ledger
        self.hop_s = hop_s
        self.concurrency = concurrency
        self.retry_s = retry_s
        self.max_kept = max_kept
        self._queue: asyncio.Queue[Charge] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._sending: set[Charge] = set()  # taken by a worker, not yet written or kept
        self.kept: list[Charge] = []  # refused by the ledger, offered again every ``retry_s``
        self.lost = 0  # past ``max_kept``, or never taken by the ledger before the drain ended
        self._retrier: asyncio.Task[None] | None = None
        self.drained = False  # the server is stopping: no worker will run a queued charge again

    async def charge(self, charge: Charge) -> None:
        """Blocking: the caller waits for the billing service and the write (or its keeping)."""
        if self.hop_s:
            await timing.sleep(self.hop_s)  # the modeled hop, exact on a coarse timer too
        await self._write(charge)

    def charge_later(self, charge: Charge) -> None:
        """Overlapped: queue the charge for the background workers and return at once."""
        if self.drained:
            self._write_now(charge)
            return
        self._workers = [worker for worker in self._workers if not worker.done()]
        if len(self._workers) < self.concurrency:  # started as needed, then they stay
            self._workers.append(asyncio.create_task(self._work()))
        self._queue.put_nowait(charge)

    @property
    def queued(self) -> int:
        """Charges waiting for a worker."""
        return self._queue.qsize()

    async def _work(self) -> None:
        while True:
            charge = await self._queue.get()
            self._sending.add(charge)
            try:
                await self.charge(charge)
            finally:
                self._sending.discard(charge)
                self._queue.task_done()

    async def _write(self, charge: Charge) -> None:
        """Write one charge; if the ledger refuses it, keep it (``_write`` never raises)."""
        if self.drained:
            self._write_now(charge)
            return
        if self.kept:  # the ledger is refusing: behind the others, without waiting for the file
            self._keep([charge])
            return
        try:
            await self.ledger.write([charge])
        except Exception as e:  # locked, full, or worse: the charge must outlive it
            self._keep([charge])
            self._refused(e)

    def _keep(self, charges: Iterable[Charge]) -> None:
        for charge in charges:
            if len(self.kept) < self.max_kept:
                self.kept.append(charge)
                continue
            if not self.lost:
                log.warning(
                    "billing: %d charges are kept in memory, the most it keeps; "
                    "later ones are counted as lost",
                    self.max_kept,
                )
            self.lost += 1
        if self.kept and (self._retrier is None or self._retrier.done()) and not self.drained:
            self._retrier = asyncio.create_task(self._retry())

    def _refused(self, error: Exception) -> None:
        if len(self.kept) == 1:  # the first refusal of this outage: said once
            log.warning(
                "billing: the ledger refused a write (%s); charges are kept in memory and written "
                "again every %g s until it takes them",
                _reason(error),
                self.retry_s,
            )

    async def _retry(self) -> None:
        """Offer the kept charges to the ledger every ``retry_s`` until it has taken them all."""
        written = 0
        while self.kept:
            await asyncio.sleep(self.retry_s)
            written += await self._write_kept()
        log.warning(
            "billing: the ledger takes writes again; the %d charges kept meanwhile are written", written
        )

    async def _write_kept(self) -> int:
        """One attempt at writing every kept charge: how many the ledger took (all or none)."""
        batch = list(self.kept)
        try:
            await self.ledger.write(batch)
        except Exception:
            return 0
        del self.kept[: len(batch)]  # those kept meanwhile stay, for the next attempt
        return len(batch)

    def _write_now(self, charge: Charge) -> None:
        """After the drain: written at once on the caller's thread, or counted and said lost."""
        try:
            self.ledger.record(charge)
        except Exception as e:
            self.lost += 1
            log.warning(
                "billing: the charge of %s could not be written (%s) and is lost",
                charge.response_id,
                _reason(e),
            )

    async def drain(self, within_s: float = DRAIN_S) -> None:
        """At shutdown, in at most ``within_s``: the queued charges through their hops and into the
        ledger, then every charge it refused offered again until it takes them or the time is up.
        Whatever it has not taken is counted in one log line as lost. Never raises."""
        deadline = time.monotonic() + within_s
        with contextlib.suppress(TimeoutError):  # returns at once when nothing is queued
            await asyncio.wait_for(self._queue.join(), within_s)
        self.drained = True  # set before the awaits below: a charge meanwhile is written, not queued
        unsent = list(self._sending)
        while not self._queue.empty():  # the time ran out: no hop now, the row matters more
            unsent.append(self._queue.get_nowait())
        for task in [*self._workers, self._retrier]:
            if task is not None:
                task.cancel()
        for task in [*self._workers, self._retrier]:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._workers, self._retrier = [], None
        # A charge cancelled mid-write may be in the ledger already: written again, it keeps its row.
        self.kept += unsent
        while self.kept and not await self._write_kept() and time.monotonic() + self.retry_s < deadline:
            await asyncio.sleep(self.retry_s)
        self.lost += len(self.kept)
        self.kept = []
        if self.lost:
            log.warning("billing: %d charges could not be written to the ledger and are lost", self.lost)


def _reason(error: Exception) -> str:
    return getattr(error, "cause", None) or str(error) or type(error).__name__
