"""A room on one server, reduced for CI: ``benchmarks/room_load.py`` with 16 learners at once.

Each learner runs a short synthetic rollout on a WebSocket connection of its own; all start
together. What is checked is what a room must never see, whatever the machine's speed: an
error, or a response missing from the billing ledger. No timing is asserted.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from conftest import room_load

from labkit.server.billing import OVERLAPPED_CONCURRENCY, Billing, Charge, Ledger
from labkit.server.database import Database
from labkit.server.profiles import load_profile

REPO = Path(__file__).resolve().parents[1]
SCENARIO = "synthetic:turns=4,output_tokens=20,tool_tokens=300,instruction_tokens=1000"
CONNECTIONS = 16


@pytest.mark.parametrize(
    "workers",
    [1, pytest.param(2, marks=pytest.mark.skipif(not hasattr(os, "fork"), reason="workers need fork"))],
)
def test_a_room_has_no_errors_and_loses_no_billing_row(workers: int) -> None:
    load = room_load()
    result = load.run_room(
        connections=CONNECTIONS, workers=workers, profile="room", scenario=SCENARIO, single=1, deadline_s=300
    )
    errors = result.single.errors + result.room.errors
    assert errors == [], errors
    assert result.room.rollouts == CONNECTIONS
    assert result.room.responses == CONNECTIONS * 4 and result.single.responses == 4
    assert result.billing_rows == result.responses, load.format_table(result)
    assert len(result.room.ttft_s) == result.room.responses  # every turn was timed
    table = load.format_table(result)
    assert f"| {CONNECTIONS} | {workers} | 0 | {result.responses} / {result.responses} |" in table


def test_the_room_profile_seats_a_room_without_queueing() -> None:
    engine = load_profile("room", REPO / "data").engine
    production = load_profile("production-like", REPO / "data")
    assert engine.replicas * engine.max_concurrent >= 2 * 64  # twice the room: uneven hashing
    assert load_profile("room", REPO / "data").network == production.network  # same per-turn costs


def test_overlapped_billing_sends_charges_concurrently(tmp_path: Path) -> None:
    """A room's responses arrive faster than one billing call at a time could record them."""
    database = Database(tmp_path / "ledger.sqlite3")
    ledger = Ledger(database)

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
            billing.charge_later(Charge(f"resp_{i}", "owner", "labkit-spark", 10, 0, 5, "completed"))
        for _ in range(5):  # let every worker take a charge
            await asyncio.sleep(0)
        assert billing.in_flight == OVERLAPPED_CONCURRENCY  # not one at a time
        billing.gate.set()
        await billing.drain()
        return billing

    billing = asyncio.run(scenario())
    assert billing.most_in_flight == OVERLAPPED_CONCURRENCY
    assert ledger.count() == OVERLAPPED_CONCURRENCY + 8
    database.close()
