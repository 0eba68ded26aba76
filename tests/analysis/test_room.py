"""The instructor's dashboard tables (``labkit.analysis.room``), on real traces from a real server.

Two learners run rollouts of every design (and one SDK chain without a ``prompt_cache_key``)
while an instructor's key watches the stream; the clients' own records are the oracle for
which responses make up each rollout and how many turns each had. Ada names herself in code
(``learner_name=``), Bo through ``$LABKIT_NAME``; Bo's SDK chain sends no name.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from openai import BadRequestError, OpenAI

from labkit.analysis.room import (
    YOU,
    by_design,
    comparison,
    label_of,
    learner_turns,
    learners,
    rollout_of,
    rollouts,
    room_figure,
    watch_room,
    who_is_who,
)
from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer
from labkit.client.room import NAME_ENV
from labkit.client.trace_watch import TraceWatcher
from labkit.scenarios import synthetic

pytestmark = pytest.mark.slow  # a room's load

MODEL = "labkit-spark"
TEACHER = "sk-room-teacher"
ADA, BO = "sk-room-ada", "sk-room-bo"
SCENARIO = synthetic(turns=3, output_tokens=20, tool_tokens=100, instruction_tokens=200)
PLAN = {ADA: ["naive", "websocket"], BO: ["appended", "sprint"]}
NAMES = {ADA: "Ada", BO: "Bo Zoë"}
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
            ada = [
                Rollout.run(server.base_url, design, SCENARIO, api_key=ADA, learner_name=NAMES[ADA])
                for design in PLAN[ADA]
            ]
            with pytest.MonkeyPatch.context() as env:
                env.setenv(NAME_ENV, NAMES[BO])
                bo = [Rollout.run(server.base_url, design, SCENARIO, api_key=BO) for design in PLAN[BO]]
            runs = {ADA: ada, BO: bo}
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


def test_a_learner_is_a_label_and_the_name_they_gave_never_the_key(room: Room) -> None:
    assert not any(key in json.dumps(room.traces) for key in (ADA, BO, TEACHER))
    table = learners(room.traces)
    assert table.loc[label_of(ADA), "name"] == NAMES[ADA]  # the instructor's own mapping agrees
    assert table.loc[label_of(BO), "name"] == NAMES[BO]  # through $LABKIT_NAME, every transport
    where = rollout_of(room.traces)
    for trace in room.traces:
        sdk = where[trace["response_id"]] == room.chain[0]  # Bo's own SDK calls sent no name
        assert trace["name"] == (None if sdk else NAMES[{label_of(k): k for k in NAMES}[trace["owner"]]])
    runs = rollouts(room.traces)
    assert set(runs["name"]) == {NAMES[ADA], NAMES[BO], ""}
    ticks = {x for bar in room_figure(room.traces).data if bar.xaxis == "x" for x in bar.x}
    assert ticks == {f"Ada · {label_of(ADA)}", f"Bo Zoë · {label_of(BO)}"}


def test_who_is_who_shows_every_label_seen_and_the_keys_handed_out(room: Room) -> None:
    cy = "sk-room-cy"  # handed out, not used yet
    table = who_is_who(room.traces, {"Ada L.": ADA, "Cy": cy})
    assert list(table.index) == [label_of(ADA), label_of(BO), label_of(cy)]  # as first seen, then the rest
    assert table.loc[label_of(ADA)].tolist() == [NAMES[ADA], "Ada L.", 6]
    assert table.loc[label_of(BO)].tolist() == [NAMES[BO], "", 6]  # not handed out here: empty, not NaN
    assert table.loc[label_of(cy)].tolist() == ["", "Cy", 0]
    assert not table.isna().any().any() and who_is_who(room.traces)["handed to"].eq("").all()


@pytest.mark.parametrize(
    ("name", "problem"), [("x" * 65, "65 characters long"), ("Ada\t", "control"), (" ", "empty")]
)
def test_the_server_refuses_a_name_that_cannot_be_one(room: Room, name: str, problem: str) -> None:
    with (
        OpenAI(base_url=room.url, api_key=ADA, max_retries=0) as client,
        pytest.raises(BadRequestError) as bad,
    ):
        client.responses.create(model=MODEL, input="Hi.", metadata={"labkit_name": name})
    error = bad.value.body
    assert (
        isinstance(error, dict) and error["param"] == "metadata.labkit_name" and problem in error["message"]
    )


def test_the_comparison_names_every_design_it_saw(room: Room) -> None:
    said = comparison(room.traces)
    assert "x as long for its first token" in said
    ends = said.splitlines()[2:6]  # each design's rollouts, end to end, in the story's order
    assert [line.split()[0] for line in ends] == ["naive", "sprint", "websocket", "appended"]


def test_designs_across_the_room(room: Room) -> None:
    table = by_design(room.traces)
    assert list(table.index) == ["naive", "sprint", "websocket", "appended"]  # the story's order
    assert table["turns"].to_dict() == {"naive": 3, "sprint": 3 + CHAIN, "websocket": 3, "appended": 3}
    assert table["rollouts"].to_dict() == {"naive": 1, "sprint": 2, "websocket": 1, "appended": 1}
    assert table["learners"].to_dict() == {"naive": 1, "sprint": 1, "websocket": 1, "appended": 1}
    assert (table["ttft_p50_ms"] > 0).all() and (table["ttft_p90_ms"] >= table["ttft_p50_ms"]).all()
    assert (table["e2e_p90_s"] >= table["e2e_p50_s"]).all()


def test_a_turns_first_token_comes_within_it(room: Room) -> None:
    table = learner_turns(room.traces)
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
    assert sum(sum(bar.y) for bar in per_learner) == len(learner_turns(room.traces))
    assert f"{TOTAL} responses" in fig.layout.title.text
    assert len(room_figure([]).data) == 2  # an empty room draws its panels


def test_outside_an_event_loop_every_trace_is_a_change(room: Room) -> None:
    assert [len(change) for change in room.changes] == list(range(1, TOTAL + 1))
    assert room.changes[-1] == room.traces


def test_a_dashboard_opened_late_starts_with_the_room(room: Room) -> None:
    """Every response had finished before it subscribed: it sees them all, as the live view did."""
    changes: list[list[dict[str, Any]]] = []
    watcher = watch_room(room.url, TEACHER, changes.append)
    try:
        late = list(watcher.traces)  # start() returned once the history had arrived
    finally:
        watcher.stop()
    assert late[: len(room.traces)] == room.traces  # the same events, labels and order
    assert len({t["response_id"] for t in late}) == len(late) and changes[-1] == late
    assert list(learners(late).index) == list(learners(room.traces).index)  # Ada and Bo


def test_in_an_event_loop_a_burst_is_one_redraw(room: Room) -> None:
    async def burst() -> tuple[list[list[dict[str, Any]]], int]:
        changes: list[list[dict[str, Any]]] = []
        watcher = watch_room(room.url, TEACHER, changes.append, every=5.0, history=False)
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


def _trace(rid: str, design: str, session: str, start: float, ttft: float, end: float) -> dict[str, Any]:
    """A finished response's trace: its first token ``ttft`` after ``start``, its last span at ``end``."""
    spans = [
        {"stage": "uplink", "start": start, "end": start + 0.001, "tokens": 0, "segment": 0},
        {"stage": "decode", "start": start + ttft / 2, "end": start + ttft, "tokens": 1, "segment": 0},
        {"stage": "billing", "start": end - 0.001, "end": end, "tokens": 0, "segment": 0},
    ]
    return {"response_id": rid, "design": design, "session": session, "status": "completed", "spans": spans}


def test_a_comparison_needs_two_designs_and_says_what_it_waits_for() -> None:
    one = [_trace("r1", "sprint", "s1", 0.0, 0.055, 1.0), _trace("r2", "sprint", "s2", 2.0, 0.055, 3.0)]
    said = comparison(one)
    assert said.startswith("Only sprint so far (2 rollouts from 1 learner, median TTFT 55 ms)")
    assert "a second design" in said and "as long" not in said and "\n" not in said


def test_a_comparison_ranks_only_what_the_rollouts_can_tell_apart() -> None:
    apart = [_trace("r1", "naive", "s1", 0.0, 0.100, 2.0), _trace("r2", "websocket", "s2", 0.0, 0.050, 1.0)]
    first, *ends = comparison(apart).splitlines()
    assert first == (
        "Median TTFT: websocket 50 ms over 1 turn, naive 100 ms over 1 turn; "
        "naive waits 2.0x as long for its first token."
    )
    assert ends == [
        "End to end per rollout, median (quickest to slowest):",
        "  naive      2.00 s (2.00 to 2.00, 1 rollout)",
        "  websocket  1.00 s (1.00 to 1.00, 1 rollout)",
    ]

    naive = [_trace("r1", "naive", "s1", 0.0, 0.1, 1.2), _trace("r2", "naive", "s2", 0.0, 0.1, 2.2)]
    sprint = [_trace("r3", "sprint", "s3", 0.0, 0.07, 1.5)]
    said = comparison(naive + sprint)
    assert (
        said.splitlines()[-1] == "Overlapping end to end, so not ranked by these rollouts: sprint and naive."
    )
    assert "  naive   1.70 s (1.20 to 2.20, 2 rollouts)" in said.splitlines()
