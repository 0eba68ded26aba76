"""Billing: one ledger row per response, written blocking or overlapped with the next request.

The ledger is a SQLite table whose primary key is the response id, so a
response can never be billed twice. ``Billing.charge`` either waits for the
billing service (the modeled hop) and the write, or queues them for
background workers that run while the next request is served. The workers
send up to ``OVERLAPPED_CONCURRENCY`` charges to the service at once, as a real
client of a billing service would, and are drained when the server shuts down,
so no charge is lost; a charge that comes after the drain (a response cancelled
at the end of the shutdown's grace period) is written at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import astuple, dataclass

from labkit.engine import timing
from labkit.server.database import Database

# Overlapped charges in flight at once. One at a time would cap a server at 1 / hop charges
# a second (100 at the 10 ms production-like hop), which a room of learners outruns: the queue
# would then grow for as long as the room runs, and take as long again to drain at shutdown.
OVERLAPPED_CONCURRENCY = 32

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


class Ledger:
    def __init__(self, database: Database) -> None:
        self._db, self._lock = database.conn, database.lock
        with self._lock:
            self._db.executescript(SCHEMA)

    def record(self, charge: Charge) -> bool:
        """Write the charge; False if this response was billed already."""
        row = (*astuple(charge)[:-1], time.time())
        with self._lock:
            cur = self._db.execute("INSERT OR IGNORE INTO billing VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        return cur.rowcount == 1

    def count(self, response_id: str | None = None) -> int:
        with self._lock:
            if response_id is None:
                return self._db.execute("SELECT COUNT(*) FROM billing").fetchone()[0]
            query = "SELECT COUNT(*) FROM billing WHERE response_id = ?"
            return self._db.execute(query, (response_id,)).fetchone()[0]


class Billing:
    """Charges responses through the modeled billing service into the ledger."""

    def __init__(self, ledger: Ledger, hop_s: float, concurrency: int = OVERLAPPED_CONCURRENCY) -> None:
        self.ledger = ledger
        self.hop_s = hop_s
        self.concurrency = concurrency
        self._queue: asyncio.Queue[Charge] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self.drained = False  # the server is stopping: no worker will run a queued charge again

    async def charge(self, charge: Charge) -> None:
        """Blocking: the caller waits for the billing service and the write."""
        if self.hop_s:
            await timing.sleep(self.hop_s)  # the modeled hop, exact on a coarse timer too
        self.ledger.record(charge)

    def charge_later(self, charge: Charge) -> None:
        """Overlapped: queue the charge for the background workers and return at once."""
        if self.drained:
            self.ledger.record(charge)  # the hop is skipped: the row matters more than its timing
            return
        self._workers = [worker for worker in self._workers if not worker.done()]
        if len(self._workers) < self.concurrency:  # started as needed, then they stay
            self._workers.append(asyncio.create_task(self._work()))
        self._queue.put_nowait(charge)

    async def _work(self) -> None:
        while True:
            charge = await self._queue.get()
            try:
                await self.charge(charge)
            finally:
                self._queue.task_done()

    async def drain(self) -> None:
        """Wait until every queued charge is written (at shutdown), then stop the workers."""
        await self._queue.join()  # returns at once when nothing is queued
        self.drained = True  # set before the awaits below: a charge meanwhile is written, not queued
        for worker in self._workers:
            worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        self._workers = []
