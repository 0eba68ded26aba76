"""Billing when the ledger refuses its writes: every charge is kept until the disk is back, or
counted as lost in one log line, and SIGTERM still ends within its bound.

Over loopback, a real ``labkit serve`` whose disk fills: the test lowers the server process's
``RLIMIT_FSIZE`` (``prlimit``, on the child only) to one byte, so every write to its SQLite
file fails as on a full disk, while a room's worth of WebSocket responses finish at once and
queue their overlapped charges behind a 300 ms billing service (more charges than workers).
Then the limit is raised again (the disk is back) and every charge must be in the ledger once;
or SIGTERM comes first, and the log must count every charge as lost, in one line.
In process: a ledger locked by another connection, with the queue filled past the workers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import resource
import sqlite3
from pathlib import Path

import pytest

from labkit.cli.serve import SHUTDOWN_BOUND_S
from labkit.client.launcher import LabkitServer
from labkit.server.stores.billing import OVERLAPPED_CONCURRENCY, Billing, Charge, Ledger
from labkit.server.stores.database import Database
from tests.helpers import ledger_rows, wait_for_rows, ws_connect

pytestmark = pytest.mark.slow  # faults: servers killed and restarted

MODEL = "labkit-spark"
CONNECTIONS, LANES = 6, 16  # 96 responses finishing together, their charges past 32 workers
FULL_DISK = 1  # bytes: RLIMIT_FSIZE past which a write fails (EFBIG), as on a full disk
REFUSED = "billing: the ledger refused a write"
BACK = re.compile(r"billing: the ledger takes writes again; the (\d+) charges kept meanwhile are written")
LOST = re.compile(r"billing: (\d+) charges could not be written to the ledger and are lost")


def fill_disk(pid: int) -> int:
    """Make every write of process ``pid`` past its files' first byte fail; the hard limit, to restore."""
    _soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (FULL_DISK, hard))
    return hard


def responses_at_once(server: LabkitServer) -> list[str]:
    """``CONNECTIONS`` sockets × ``LANES`` lanes of short answers, all sent before any is read;
    the ids of those that completed."""
    sockets = [ws_connect(server) for _ in range(CONNECTIONS)]
    try:
        for ws in sockets:
            for lane in range(LANES):
                create = {"type": "response.create", "model": MODEL, "input": "Say hi.", "store": False}
                ws.send(json.dumps({**create, "stream_id": f"lane-{lane}"}))
        ids = []
        for ws in sockets:
            finished = 0
            while finished < LANES:
                event = json.loads(ws.recv(timeout=30))
                assert event["type"] != "error", event
                if event["type"] == "response.completed":
                    ids.append(event["response"]["id"])
                    finished += 1
        return ids
    finally:
        for ws in sockets:
            ws.close()


def log_lines(server: LabkitServer, pattern: str | re.Pattern[str]) -> list[str]:
    return [line for line in list(server.log) if re.search(pattern, line)]


def stop_within_bound(server: LabkitServer) -> int:
    """SIGTERM, and the exit status, which must come within ``SHUTDOWN_BOUND_S``."""
    assert server.process is not None
    server.process.terminate()
    return server.process.wait(timeout=SHUTDOWN_BOUND_S)


def test_charges_refused_by_a_full_disk_are_written_once_it_is_back(
    slow_billing: Path, tmp_path: Path
) -> None:
    db = tmp_path / "ledger.sqlite3"
    with LabkitServer(db=db, args=["--profile", str(slow_billing)]) as server:
        pid = server.processes()[0]
        hard = fill_disk(pid)
        ids = responses_at_once(server)
        assert len(ids) == CONNECTIONS * LANES
        assert wait_for_rows(db, ids[:1]) == {ids[0]: []}  # waited a while: nothing could be written
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))  # the disk is back
        rows = wait_for_rows(db, ids)
        assert [len(rows[rid]) for rid in ids] == [1] * len(ids), "a charge was lost or billed twice"
        assert len(log_lines(server, REFUSED)) == 1  # said once, not once a charge
        back = [BACK.search(line) for line in log_lines(server, BACK)]
        assert len(back) == 1 and back[0] is not None and int(back[0].group(1)) == len(ids)
        assert stop_within_bound(server) == 0
        assert not any("Traceback" in line for line in server.log)


def test_charges_the_disk_never_takes_are_counted_as_lost_in_one_line(
    slow_billing: Path, tmp_path: Path
) -> None:
    db = tmp_path / "ledger.sqlite3"
    with LabkitServer(db=db, args=["--profile", str(slow_billing)]) as server:
        fill_disk(server.processes()[0])
        ids = responses_at_once(server)
        assert stop_within_bound(server) == 0  # the old server's drain waited for dead workers forever
        lost = [LOST.search(line) for line in log_lines(server, LOST)]
        assert len(lost) == 1 and lost[0] is not None and int(lost[0].group(1)) == len(ids)
        assert not any("Traceback" in line for line in server.log)
    assert all(ledger_rows(db, rid) == [] for rid in ids)


# ---------------------------------------------------------------- in process, a locked ledger


def charge(response_id: str) -> Charge:
    return Charge(response_id, "owner", MODEL, 10, 0, 5, "completed")


class GatedBilling(Billing):
    """Billing whose service answers only when the test opens the gate (so charges queue up)."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger, hop_s=0, retry_s=0.01)
        self.gate = asyncio.Event()
        self.in_flight = 0

    async def charge(self, charge: Charge) -> None:
        self.in_flight += 1
        await self.gate.wait()
        self.in_flight -= 1
        await super().charge(charge)


@pytest.fixture
def locked_ledger(tmp_path: Path) -> tuple[Ledger, sqlite3.Connection]:
    """A ledger, and another connection to its file that holds the write lock (``BEGIN IMMEDIATE``)."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(Database(path, busy_timeout_s=0.05))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return ledger, holder


def test_a_locked_ledger_keeps_a_queue_past_its_workers_and_writes_it_once_unlocked(
    locked_ledger: tuple[Ledger, sqlite3.Connection], caplog: pytest.LogCaptureFixture
) -> None:
    ledger, holder = locked_ledger
    count = OVERLAPPED_CONCURRENCY + 16

    async def scenario() -> GatedBilling:
        billing = GatedBilling(ledger)
        for i in range(count):
            billing.charge_later(charge(f"resp_{i}"))
        for _ in range(5):  # let every worker take a charge
            await asyncio.sleep(0)
        assert (billing.in_flight, billing.queued) == (OVERLAPPED_CONCURRENCY, 16)  # past the workers
        billing.gate.set()
        for _ in range(200):  # every write refused: each charge kept, and no worker lost
            if len(billing.kept) == count:
                break
            await asyncio.sleep(0.01)
        assert len(billing.kept) == count and billing.queued == 0
        holder.execute("ROLLBACK")  # the lock is released: the kept charges go in
        await billing.drain()
        return billing

    with caplog.at_level(logging.WARNING, logger="uvicorn.error"):
        billing = asyncio.run(scenario())
    assert (ledger.count(), billing.lost, billing.kept) == (count, 0, [])
    said = [record.getMessage() for record in caplog.records]
    assert sum(REFUSED in line for line in said) == 1, said


def test_a_drain_past_its_time_counts_what_the_ledger_never_took(
    locked_ledger: tuple[Ledger, sqlite3.Connection], caplog: pytest.LogCaptureFixture
) -> None:
    ledger, holder = locked_ledger

    async def scenario() -> Billing:
        billing = Billing(ledger, hop_s=0.01, retry_s=0.01)
        for i in range(OVERLAPPED_CONCURRENCY + 16):
            billing.charge_later(charge(f"resp_{i}"))
        await billing.drain(within_s=0.5)  # the lock is never released
        billing.charge_later(charge("resp_late"))  # after the drain: tried at once, and lost too
        return billing

    with caplog.at_level(logging.WARNING, logger="uvicorn.error"):
        billing = asyncio.run(scenario())
    holder.execute("ROLLBACK")
    assert billing.lost == OVERLAPPED_CONCURRENCY + 16 + 1 and ledger.count() == 0
    lost = [m for m in (LOST.search(r.getMessage()) for r in caplog.records) if m]
    assert [int(m.group(1)) for m in lost] == [OVERLAPPED_CONCURRENCY + 16]
