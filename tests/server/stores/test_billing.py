"""Billing: one ledger row per response, written before the answer or overlapped with the next request.

Over loopback, against a server whose billing service takes 300 ms (so an overlapped charge is
visibly pending): the blocking designs write the row before they answer, a client that leaves
right after its answer is billed once, and a server told to stop drains the overlapped queue.
In process: the ledger never bills a response twice, and the overlapped workers send charges
side by side and write every one, even one that comes after the drain. Rows are read from
SQLite; nothing here measures a duration.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from labkit.api.extensions import DESIGN_HEADER
from labkit.client.launcher import LabkitServer
from labkit.server.stores.billing import OVERLAPPED_CONCURRENCY, Billing, Charge, Ledger
from labkit.server.stores.database import Database
from tests.helpers import (
    auth_headers,
    by_stage,
    ledger_rows,
    server_spans,
    wait_for_rows,
    ws_connect,
    ws_turn,
)

pytestmark = pytest.mark.slow  # servers of its own

MODEL = "labkit-spark"


def charge(response_id: str, status: str = "completed") -> Charge:
    return Charge(response_id, "owner", MODEL, 10, 0, 5, status)


# ---------------------------------------------------------------- over loopback


@pytest.fixture(scope="module")
def billing_server(slow_billing: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:
    db = tmp_path_factory.mktemp("billing") / "ledger.sqlite3"
    with LabkitServer(db=db, args=["--profile", str(slow_billing)]) as srv:
        yield srv


@pytest.mark.parametrize("design", ["naive", "sprint"])
def test_blocking_designs_write_the_row_before_answering(billing_server: LabkitServer, design: str) -> None:
    reply = httpx.post(
        f"{billing_server.base_url}/responses",
        json={"model": MODEL, "input": "Say hello.", "store": False},
        headers={**auth_headers(), DESIGN_HEADER: design},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    response = reply.json()
    rows = ledger_rows(billing_server.db, response["id"])  # no waiting: it must be there already
    assert rows == [("completed", response["usage"]["input_tokens"], 0, response["usage"]["output_tokens"])]
    billing = by_stage(server_spans(billing_server.base_url, response["id"]))["billing"]
    assert billing["detail"]["overlapped"] is False


@pytest.mark.parametrize("design", ["naive", "sprint"])
def test_sse_client_closing_after_completion_is_billed_once(
    billing_server: LabkitServer, design: str
) -> None:
    body = {"model": MODEL, "input": "Say hello.", "stream": True, "store": False}
    completed = None
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST",
            f"{billing_server.base_url}/responses",
            json=body,
            headers={**auth_headers(), DESIGN_HEADER: design},
        ) as reply,
    ):
        for line in reply.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: ") :])
                if event["type"] == "response.completed":
                    completed = event["response"]
                    break  # leave mid-stream: the socket closes without reading further
    assert completed is not None
    # A ledger write that finds the database slow (a busy machine) is kept and written shortly after.
    rows = wait_for_rows(billing_server.db, [completed["id"]])[completed["id"]]
    assert [row[0] for row in rows] == ["completed"]


def test_ws_client_disconnecting_after_completion_is_billed_once(billing_server: LabkitServer) -> None:
    with ws_connect(billing_server, "?design=websocket") as ws:
        response = ws_turn(ws, input="Say hello.", store=False)
    # The socket is closed; the overlapped charge is still on its way to the ledger.
    rows = wait_for_rows(billing_server.db, [response["id"]])[response["id"]]
    assert [row[0] for row in rows] == ["completed"]
    billing = by_stage(server_spans(billing_server.base_url, response["id"]))["billing"]
    assert billing["detail"]["overlapped"] is True


def test_shutdown_drains_the_overlapped_billing_queue(slow_billing: Path, tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite3"
    srv = LabkitServer(db=db, args=["--profile", str(slow_billing)]).start()
    try:
        ids = []
        with ws_connect(srv) as ws:
            for i in range(5):  # five charges queue up behind a 300 ms billing service
                ids.append(ws_turn(ws, input=f"Say hello {i}.", store=False)["id"])
            srv.stop()  # right after the last completion, socket still open
    finally:
        srv.close()
    with sqlite3.connect(db) as conn:
        counts = {
            rid: conn.execute("SELECT COUNT(*) FROM billing WHERE response_id = ?", (rid,)).fetchone()[0]
            for rid in ids
        }
        total = conn.execute("SELECT COUNT(*) FROM billing").fetchone()[0]
    assert counts == dict.fromkeys(ids, 1)
    assert total == len(ids)


# ---------------------------------------------------------------- the ledger and the workers, in process


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    """A ledger in a database of its own (``tmp_path / "ledger.sqlite3"``)."""
    database = Database(tmp_path / "ledger.sqlite3")
    yield Ledger(database)
    database.close()


def test_the_ledger_bills_a_response_once(ledger: Ledger, tmp_path: Path) -> None:
    assert ledger.record(charge("resp_1")) is True
    assert ledger.record(charge("resp_1", "cancelled")) is False  # the first row stands
    assert ledger.record(charge("resp_2")) is True
    assert (ledger.count("resp_1"), ledger.count()) == (1, 2)
    assert ledger_rows(tmp_path / "ledger.sqlite3", "resp_1") == [("completed", 10, 0, 5)]


def test_a_blocking_charge_is_written_when_it_returns_and_an_overlapped_one_later(ledger: Ledger) -> None:
    async def scenario() -> None:
        billing = Billing(ledger, hop_s=0.01)
        await billing.charge(charge("resp_blocking"))
        assert ledger.count("resp_blocking") == 1
        billing.charge_later(charge("resp_overlapped"))
        assert ledger.count("resp_overlapped") == 0  # queued: the caller went on at once
        await billing.drain()
        assert ledger.count("resp_overlapped") == 1

    asyncio.run(scenario())


def test_overlapped_billing_sends_charges_concurrently(ledger: Ledger) -> None:
    """A room's responses arrive faster than one billing call at a time could record them."""

    class GatedBilling(Billing):
        """Billing whose service answers only when the test opens the gate."""

        def __init__(self) -> None:
            super().__init__(ledger, hop_s=0)
            self.gate = asyncio.Event()
            self.in_flight = 0
            self.most_in_flight = 0

        async def charge(self, charge: Charge) -> None:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            await self.gate.wait()
            self.in_flight -= 1
            await super().charge(charge)

    async def scenario() -> GatedBilling:
        billing = GatedBilling()
        for i in range(OVERLAPPED_CONCURRENCY + 8):
            billing.charge_later(charge(f"resp_{i}"))
        for _ in range(5):  # let every worker take a charge
            await asyncio.sleep(0)
        assert billing.in_flight == OVERLAPPED_CONCURRENCY  # not one at a time
        billing.gate.set()
        await billing.drain()
        return billing

    billing = asyncio.run(scenario())
    assert billing.most_in_flight == OVERLAPPED_CONCURRENCY
    assert ledger.count() == OVERLAPPED_CONCURRENCY + 8


def test_a_charge_after_the_drain_is_written_at_once(ledger: Ledger) -> None:
    async def scenario() -> None:
        billing = Billing(ledger, hop_s=0.05)
        billing.charge_later(charge("resp_queued"))
        await billing.drain()
        assert ledger.count("resp_queued") == 1
        billing.charge_later(charge("resp_late", "cancelled"))
        assert ledger.count("resp_late") == 1  # no worker is left to run a queued one

    asyncio.run(scenario())
