"""The instructor's dashboard tables (``labkit.analysis.room``), on real traces from a real server.

Two learners run rollouts of every design (and one SDK chain without a ``prompt_cache_key``)
while an instructor's key watches the stream; the clients' own records are the oracle for
which responses make up each rollout and how many turns each had.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from openai import OpenAI

from labkit.analysis.room import (
    YOU,
    by_design,
    learners,
    rollout_of,
    rollouts,
    room_figure,
    turns,
    watch_room,
)
from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer
from labkit.client.trace_watch import TraceWatcher
from labkit.scenarios import synthetic

MODEL = "labkit-spark"
TEACHER = "sk-room-teacher"
ADA, BO = "sk-room-ada", "sk-room-bo"
SCENARIO = synthetic(turns=3, output_tokens=20, tool_tokens=100, instruction_tokens=200)
PLAN = {ADA: ["naive", "websocket"], BO: ["appended", "sprint"]}
CHAIN = 2  # BO's SDK responses, linked by previous_response_id only
TOTAL = 3 + 3 + 1 + 3 + CHAIN  # an appended rollout is one response


@dataclass
class Room:
    traces: list[dict[str, Any]]  # what the instructor's key received
    own: list[dict[str, Any]]  # what ADA's key received
    changes: list[list[dict[str, Any]]]  # watch_room's calls, outside an event loop
    runs: dict[str, list[Rollout]]
    chain: list[str]
    url: str


def wait_for(items: list[Any], count: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while len(items) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # anything late or duplicated would arrive now


@pytest.fixture(scope="module")
def room() -> Iterator[Room]:
    with LabkitServer(args=["--profile", "local", "--instructor-key", TEACHER]) as server:
        changes: list[list[dict[str, Any]]] = []
        teacher = watch_room(server.base_url, TEACHER, changes.append)
        mine = TraceWatcher(server.base_url, ADA).start()
        try:
            runs = {
                key: [Rollout.run(server.base_url, design, SCENARIO, api_key=key) for design in designs]
                for key, designs in PLAN.items()
            }
            with OpenAI(base_url=server.base_url, api_key=BO, max_retries=0) as client:
                first = client.responses.create(model=MODEL, input="Say hello.")
                second = client.responses.create(model=MODEL, input="Again.", previous_response_id=first.id)
            wait_for(teacher.traces, TOTAL)
            wait_for(mine.traces, 6)
            yield Room(
                list(teacher.traces), list(mine.traces), changes, runs, [first.id, second.id], server.base_url
            )
        finally:
            teacher.stop()
            mine.stop()


def test_rollouts_are_the_clients_rollouts(room: Room) -> None:
    table = rollouts(room.traces)
    assert len(table) == 4 + 1
    where = rollout_of(room.traces)
    for runs in room.runs.values():
        for run in runs:
            ids = {record.response_id for record in run.records}
            (rollout,) = {where[rid] for rid in ids}  # one rollout holds them all
            assert {rid for rid, r in where.items() if r == rollout} == ids  # and nothing else
            row = table[table["rollout"] == rollout].iloc[0]
            assert (row["design"], row["turns"], row["responses"]) == (run.design, len(run.records), len(ids))
            assert row["e2e_s"] > 0
    (chain,) = {where[rid] for rid in room.chain}
    assert chain == room.chain[0]  # the chain's first response names it
    row = table[table["rollout"] == chain].iloc[0]
    assert (row["design"], row["turns"], row["responses"]) == ("sprint", CHAIN, CHAIN)
    assert list(table["start"]) == sorted(table["start"])  # in the order they began


def test_learners_say_who_ran_what(room: Room) -> None:
    table = learners(room.traces, now=time.time())
    assert len(table) == 2 and YOU not in table.index  # the instructor sees labels, not keys
    ada = table.loc[room.traces[0]["owner"]]  # ADA ran first
    bo = table.loc[next(label for label in table.index if label != ada.name)]
    assert (ada["responses"], ada["rollouts"], ada["turns"], ada["designs"]) == (6, 2, 6, "naive, websocket")
    assert (bo["responses"], bo["rollouts"], bo["turns"], bo["designs"]) == (6, 3, 8, "appended, sprint")
    assert ada["models"] == bo["models"] == MODEL and ada["failed"] == bo["failed"] == 0
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", seen) for seen in table["last_seen"])
    assert (table["idle_s"] >= 0).all() and table.index[0] == bo.name  # the most recent first


def test_designs_across_the_room(room: Room) -> None:
    table = by_design(room.traces)
    assert list(table.index) == ["naive", "sprint", "websocket", "appended"]  # the story's order
    assert table["turns"].to_dict() == {"naive": 3, "sprint": 3 + CHAIN, "websocket": 3, "appended": 3}
    assert table["rollouts"].to_dict() == {"naive": 1, "sprint": 2, "websocket": 1, "appended": 1}
    assert table["learners"].to_dict() == {"naive": 1, "sprint": 1, "websocket": 1, "appended": 1}
    assert (table["ttft_p50_ms"] > 0).all() and (table["ttft_p90_ms"] >= table["ttft_p50_ms"]).all()
    assert (table["e2e_p90_s"] >= table["e2e_p50_s"]).all()


def test_a_turns_first_token_comes_within_it(room: Room) -> None:
    table = turns(room.traces)
    assert len(table) == 3 + 3 + 3 + 3 + CHAIN
    assert ((table["ttft_s"] > 0) & (table["ttft_s"] < table["wall_s"])).all()
    appended = table[table["design"] == "appended"]
    assert appended["response_id"].nunique() == 1 and list(appended["turn"]) == [0, 1, 2]


def test_a_learners_own_view(room: Room) -> None:
    assert len(room.own) == 6
    assert list(learners(room.own).index) == [YOU]
    assert set(by_design(room.own).index) == {"naive", "websocket"}


def test_the_figure_counts_every_response(room: Room) -> None:
    fig = room_figure(room.traces)
    per_learner = [bar for bar in fig.data if bar.xaxis == "x"]
    assert [bar.name for bar in per_learner] == ["naive", "sprint", "websocket", "appended"]
    assert sum(sum(bar.y) for bar in per_learner) == len(turns(room.traces))
    assert f"{TOTAL} responses" in fig.layout.title.text
    assert len(room_figure([]).data) == 2  # an empty room draws its panels


def test_outside_an_event_loop_every_trace_is_a_change(room: Room) -> None:
    assert [len(change) for change in room.changes] == list(range(1, TOTAL + 1))
    assert room.changes[-1] == room.traces


def test_in_an_event_loop_a_burst_is_one_redraw(room: Room) -> None:
    async def burst() -> tuple[list[list[dict[str, Any]]], int]:
        changes: list[list[dict[str, Any]]] = []
        watcher = watch_room(room.url, TEACHER, changes.append, every=5.0)
        try:

            def three() -> None:
                with OpenAI(base_url=room.url, api_key=ADA, max_retries=0) as client:
                    for n in range(3):
                        client.responses.create(model=MODEL, input=f"Burst {n}.")

            await asyncio.to_thread(three)
            for _ in range(200):  # bounded: up to 10 s for the one redraw
                if changes:
                    break
                await asyncio.sleep(0.05)
            return changes, len(watcher.traces)
        finally:
            watcher.stop()

    changes, received = asyncio.run(burst())
    assert received == 3 and [len(change) for change in changes] == [3]
