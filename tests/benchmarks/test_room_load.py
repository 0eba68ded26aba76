"""A room on one server, reduced for CI: ``benchmarks/room_load.py`` with 16 learners at once.

Each learner runs a short synthetic rollout on a WebSocket connection of its own; all start
together. What is checked is what a room must never see, whatever the machine's speed: an
error, or a response missing from the billing ledger. No timing is asserted.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import room_load

pytestmark = pytest.mark.slow  # a room's load

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
