"""The traces of ``labkit serve --workers 2``: every response once, in order per key, on any worker;
a finished one's spans from either worker, watched or not, and a running appended rollout's at each
of its pauses; the room's history first, on request.

Learners send responses over new connections (JSON, SSE and WebSocket mode in turn), so the
kernel hands them to either worker; subscriptions are opened until each worker holds one, and
which worker holds a connection is read off /proc (``worker_holding``, in tests/helpers.py), so the
test checks that traces really cross workers rather than hoping they do.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import sqlite3
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from labkit.api.inject import BETA_HEADER, MULTI_AGENT_BETA
from labkit.api.owners import key_label
from labkit.client.launcher import LabkitServer
from labkit.scenarios import FETCH_TOOL
from labkit.server.stores.database import Database
from labkit.server.stores.shared_traces import RUNNING_PRUNE_EVERY, SharedFeed, SharedTraces
from tests.helpers import port_of, worker_holding

pytestmark = [
    pytest.mark.slow,  # several worker processes
    pytest.mark.skipif(
        not Path("/proc/net/tcp").exists() or not hasattr(__import__("os"), "fork"),
        reason="needs Linux's /proc and fork",
    ),
]

MODEL = "labkit-spark"
TEACHER = "sk-room-teacher"
LEARNERS = ["sk-room-ada", "sk-room-bo", "sk-room-cy"]
PER_LEARNER = 12
STREAM = "/v1/labkit/traces/stream"


class Subscription:
    """A trace-stream subscription on a connection of its own, read on a thread; its worker is known.
    With ``history``, ``live_from`` is how many traces came before the ``: live`` line."""

    def __init__(self, server: LabkitServer, key: str, *, history: bool = False) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=30)
        path = STREAM + ("?history=true" if history else "")
        self.conn.request("GET", path, headers={"authorization": f"Bearer {key}"})
        self.reply = self.conn.getresponse()
        assert self.reply.status == 200
        assert self.reply.readline() == b": subscribed\n"  # the subscription is live from here
        assert self.conn.sock is not None
        self.worker = worker_holding(server, self.conn.sock.getsockname()[1])
        self.traces: list[dict[str, Any]] = []
        self.live_from: int | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
            for line in self.reply:
                if line.startswith(b"data: "):
                    self.traces.append(json.loads(line[len(b"data: ") :]))
                elif line == b": live\n":
                    self.live_from = len(self.traces)

    def ids(self) -> list[str]:
        return [trace["response_id"] for trace in self.traces]

    def close(self) -> None:
        if self.conn.sock is not None:
            with contextlib.suppress(OSError):
                self.conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the reading thread
        self._thread.join(timeout=5)
        self.conn.close()


def one_on_each_worker(
    server: LabkitServer, key: str, opened: list[Subscription], *, history: bool = False
) -> list[Subscription]:
    """Subscribe until every worker holds one of ``key``'s subscriptions (extras are closed)."""
    workers = set(server.processes()[1:])
    chosen: dict[int, Subscription] = {}
    for _ in range(40):  # bounded: each new connection lands on either worker
        subscription = Subscription(server, key, history=history)
        opened.append(subscription)
        if subscription.worker in chosen:
            subscription.close()
        else:
            chosen[subscription.worker] = subscription
        if set(chosen) == workers:
            return list(chosen.values())
    raise AssertionError(f"{key}'s subscriptions all landed on {set(chosen)}")


def respond(server: LabkitServer, key: str, turn: int) -> tuple[str, int]:
    """One response on a new connection, by JSON, SSE or WebSocket mode in turn: (id, its worker)."""
    body = {"model": MODEL, "input": f"Turn {turn}, say hello.", "store": False}
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    if turn % 3 == 2:
        with connect(server.ws_url, additional_headers=headers) as ws:
            worker = worker_holding(server, ws.socket.getsockname()[1])
            ws.send(json.dumps({"type": "response.create", **body}))
            while (event := json.loads(ws.recv(timeout=30)))["type"] != "response.completed":
                assert event["type"] != "error", event
            return event["response"]["id"], worker
    conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=30)
    try:
        conn.request("POST", "/v1/responses", json.dumps({**body, "stream": turn % 3 == 1}), headers)
        reply = conn.getresponse()
        assert conn.sock is not None
        worker = worker_holding(server, conn.sock.getsockname()[1])
        text = reply.read().decode()
        assert reply.status == 200, text
        if turn % 3 == 0:
            return json.loads(text)["id"], worker
        events = [
            json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")
        ]
        return next(e["response"]["id"] for e in events if e["type"] == "response.completed"), worker
    finally:
        conn.close()


def spans_of(server: LabkitServer, key: str, response_id: str) -> tuple[int, Any, int]:
    """``GET /v1/labkit/traces`` on a new connection: status, spans (or error), answering worker."""
    conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=30)
    try:
        path = f"/v1/labkit/traces?response_id={response_id}"
        conn.request("GET", path, headers={"authorization": f"Bearer {key}"})
        reply = conn.getresponse()
        assert conn.sock is not None
        worker = worker_holding(server, conn.sock.getsockname()[1])
        data = json.loads(reply.read())
        return reply.status, data.get("data", data), worker
    finally:
        conn.close()


def spans_on_each_worker(server: LabkitServer, key: str, response_id: str) -> dict[int, tuple[int, Any]]:
    """``spans_of`` on new connections until every worker has answered: (status, spans) by worker."""
    workers = set(server.processes()[1:])
    answers: dict[int, tuple[int, Any]] = {}
    for _ in range(40):  # bounded: each new connection lands on either worker
        status, spans, worker = spans_of(server, key, response_id)
        answers[worker] = (status, spans)
        if set(answers) == workers:
            return answers
    raise AssertionError(f"every GET landed on {set(answers)}")


def wait_for(subscriptions: list[Subscription], count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while any(len(s.traces) < count for s in subscriptions) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # anything late or duplicated would arrive now


def test_every_worker_streams_the_whole_room_once_in_order_per_key() -> None:
    opened: list[Subscription] = []
    with LabkitServer(workers=2, args=["--profile", "local", "--instructor-key", TEACHER]) as server:
        try:
            teachers = one_on_each_worker(server, TEACHER, opened)
            adas = one_on_each_worker(server, LEARNERS[0], opened)

            def learner(key: str) -> list[tuple[str, int]]:
                return [respond(server, key, turn) for turn in range(PER_LEARNER)]

            with ThreadPoolExecutor(len(LEARNERS)) as pool:  # the learners at once, each in sequence
                sent = dict(zip(LEARNERS, pool.map(learner, LEARNERS), strict=True))
            ids = {key: [rid for rid, _ in steps] for key, steps in sent.items()}
            total = len(LEARNERS) * PER_LEARNER
            wait_for(teachers, total)
            wait_for(adas, PER_LEARNER)

            served = Counter(worker for steps in sent.values() for _, worker in steps)
            assert set(served) == set(server.processes()[1:]), served  # both workers served some
            print(f"responses per worker: {dict(served)}")

            everyone = sorted(rid for key_ids in ids.values() for rid in key_ids)
            for teacher in teachers:
                seen = teacher.ids()
                assert sorted(seen) == everyone and len(set(seen)) == total  # every one, once
                labels = {trace["response_id"]: trace["owner"] for trace in teacher.traces}
                for key_ids in ids.values():
                    label = labels[key_ids[0]]
                    assert [rid for rid in seen if labels[rid] == label] == key_ids  # in order per key
                assert not any(key in json.dumps(teacher.traces) for key in LEARNERS)
            assert teachers[0].ids() == teachers[1].ids()  # one order for the whole room

            for ada in adas:  # a learner, on either worker, sees only its own, in order
                assert ada.ids() == ids[LEARNERS[0]]
                assert all("owner" not in trace for trace in ada.traces)

            # Every finished response's spans can be read on either worker, by its own key only.
            streamed = {trace["response_id"]: trace["spans"] for trace in teachers[0].traces}
            elsewhere = 0
            for key, steps in sent.items():
                for rid, ran_on in steps:
                    status, spans, answered_by = spans_of(server, key, rid)
                    assert status == 200 and spans == streamed[rid]
                    elsewhere += answered_by != ran_on
            assert elsewhere > 0, "some spans were read from the worker that did not run the response"
            assert spans_of(server, LEARNERS[1], ids[LEARNERS[0]][0])[0] == 404
        finally:
            for subscription in opened:
                subscription.close()
        server.stop()
        assert server.process is not None and server.process.returncode == 0


def test_a_finished_responses_spans_answer_on_both_workers_with_nobody_watching() -> None:
    """No subscription anywhere: every finished response's spans are still found on either worker."""
    with LabkitServer(workers=2, args=["--profile", "local", "--api-key", LEARNERS[0]]) as server:
        for turn in range(3):  # JSON, SSE, WebSocket mode
            rid, ran_on = respond(server, LEARNERS[0], turn)
            answers = spans_on_each_worker(server, LEARNERS[0], rid)
            assert [status for status, _ in answers.values()] == [200, 200], (ran_on, answers)
            first, second = (spans for _, spans in answers.values())
            assert first == second and [span["stage"] for span in first][-1] == "billing"


APPENDED_CALLS = 2  # the synthetic rollout's calls, a pause each; then its answer
APPENDED_SCENARIO = f"synthetic:turns={APPENDED_CALLS + 1},output_tokens=20,tool_tokens=50"


class RawRollout:
    """An appended rollout over a raw WebSocket, on either wire: the prototype's (``response.done``,
    answered by ``response.append``) or the beta's (the call's ``response.output_item.done`` is the
    cue, answered by ``response.inject``)."""

    def __init__(self, server: LabkitServer, key: str, wire: str) -> None:
        headers = {"authorization": f"Bearer {key}"}
        if wire == "inject":
            headers[BETA_HEADER] = MULTI_AGENT_BETA
        self.ws = connect(server.ws_url + "?design=appended", additional_headers=headers)
        self.wire = wire
        self.response_id = ""
        body = {"model": MODEL, "tools": [FETCH_TOOL], "input": "Work.", "store": False}
        body["metadata"] = {"labkit_scenario": APPENDED_SCENARIO}
        self.ws.send(json.dumps({"type": "response.create", **body}))

    def next_pause(self) -> list[dict[str, Any]] | None:
        """The calls the response waits for at its next pause; None once it has completed."""
        while True:
            event = json.loads(self.ws.recv(timeout=30))
            kind = event["type"]
            assert kind not in ("error", "response.failed", "response.inject.failed"), event
            if kind == "response.created":
                self.response_id = event["response"]["id"]
            elif kind == "response.done":
                return event["pending_calls"]
            elif kind == "response.output_item.done" and self.wire == "inject":
                if event["item"]["type"] == "function_call":
                    return [event["item"]]
            elif kind == "response.completed":
                return None

    def answer(self, calls: list[dict[str, Any]]) -> None:
        outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "ok"} for c in calls]
        kind = "response.inject" if self.wire == "inject" else "response.append"
        self.ws.send(json.dumps({"type": kind, "response_id": self.response_id, "input": outputs}))


@pytest.mark.parametrize("wire", ["prototype", "inject"])
def test_a_running_appended_rollouts_spans_answer_on_both_workers_at_each_pause(wire: str) -> None:
    """Right after each pause's event, either worker answers with the spans so far, the same on both
    (the last one this segment's decode); once it has finished, its finished spans, and the running
    response's row is gone from the file."""
    with LabkitServer(workers=2, args=["--profile", "local", "--api-key", LEARNERS[0]]) as server:
        rollout = RawRollout(server, LEARNERS[0], wire)
        segment = 0
        try:
            while (calls := rollout.next_pause()) is not None:
                answers = spans_on_each_worker(server, LEARNERS[0], rollout.response_id)
                assert [status for status, _ in answers.values()] == [200, 200], (segment, answers)
                first, second = (spans for _, spans in answers.values())
                assert first == second  # the worker running it, and the other
                assert (first[-1]["stage"], first[-1]["segment"]) == ("decode", segment)
                rollout.answer(calls)
                segment += 1
        finally:
            rollout.ws.close()
        assert segment == APPENDED_CALLS
        answers = spans_on_each_worker(server, LEARNERS[0], rollout.response_id)
        assert [status for status, _ in answers.values()] == [200, 200], answers
        first, second = (spans for _, spans in answers.values())
        assert first == second and first[-1]["stage"] == "billing"
        with contextlib.closing(sqlite3.connect(server.db)) as db:
            assert db.execute("SELECT COUNT(*) FROM running_traces").fetchone() == (0,)


def test_the_rooms_history_comes_first_on_either_worker_then_live_each_once() -> None:
    opened: list[Subscription] = []
    with LabkitServer(workers=2, args=["--profile", "local", "--instructor-key", TEACHER]) as server:
        try:
            # One response at a time, so the room's order is the order they were sent in.
            everyone, kept, ran_on = [], {key: [] for key in LEARNERS[:2]}, set()
            for turn in range(40):  # bounded: until both workers have finished some
                for key in LEARNERS[:2]:
                    rid, worker = respond(server, key, turn)
                    everyone.append(rid)
                    kept[key].append(rid)
                    ran_on.add(worker)
                if turn >= 2 and ran_on == set(server.processes()[1:]):
                    break

            teachers = one_on_each_worker(server, TEACHER, opened, history=True)
            adas = one_on_each_worker(server, LEARNERS[0], opened, history=True)
            later = [respond(server, LEARNERS[0], turn)[0] for turn in range(3)]
            wait_for(teachers, len(everyone) + 3)
            wait_for(adas, len(kept[LEARNERS[0]]) + 3)

            for teacher in teachers:  # the room since it began, oldest first, then live: each once
                assert teacher.ids() == everyone + later and teacher.live_from == len(everyone)
                labels = {trace["response_id"]: trace.get("owner") for trace in teacher.traces}
                for key, ids in kept.items():  # labelled as the live ones are
                    assert {labels[rid] for rid in ids} == {key_label(key)}
            assert teachers[0].ids() == teachers[1].ids()  # one order for the whole room
            for ada in adas:  # a learner's history is its own
                assert ada.ids() == kept[LEARNERS[0]] + later and ada.live_from == len(kept[LEARNERS[0]])
                assert all("owner" not in trace for trace in ada.traces)
        finally:
            for subscription in opened:
                subscription.close()


def test_a_subscriber_sees_what_finishes_after_it_subscribes(tmp_path: Path) -> None:
    """Two workers' feeds over one file, in one process: rows before a subscription are not sent live."""

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        one, two = Database(tmp_path / "room.sqlite3"), Database(tmp_path / "room.sqlite3")
        shared_one, shared_two = SharedTraces(one, room="r"), SharedTraces(two, room="r")
        another = SharedTraces(one, room="another")
        feed_one, feed_two, other_room = SharedFeed(shared_one), SharedFeed(shared_two), SharedFeed(another)
        shared_one.append("key_a", {"response_id": "resp_before", "spans": []})
        watching = feed_two.subscribe("key_a", after=shared_two.last())
        teacher = feed_one.subscribe("key_t", sees_everyone=True, after=shared_one.last())
        stranger = other_room.subscribe("key_a", sees_everyone=True, after=another.last())
        for n in range(3):  # alternately on each worker
            (shared_one if n % 2 else shared_two).append("key_a", {"response_id": f"resp_{n}", "spans": []})
        await asyncio.sleep(0.3)
        for feed in (feed_one, feed_two, other_room):
            feed.close()
        got = []
        for subscriber in (watching, teacher, stranger):
            events = []
            while (event := subscriber.queue.get_nowait()) is not None:
                events.append(event["response_id"])
            got.append(events)
        one.close()
        two.close()
        return got[0], got[1], got[2]

    own, teacher, stranger = asyncio.run(scenario())
    assert own == teacher == ["resp_0", "resp_1", "resp_2"]
    assert stranger == []  # another server given the same file


def test_the_running_rows_are_bounded_by_responses_and_bytes_and_never_streamed(tmp_path: Path) -> None:
    """A rollout whose client left never finishes: its rows stay until the responses written to
    least recently are pruned, whole, past the table's responses or bytes; a response whose first
    rows went is read as none, never as a part of itself."""
    db = Database(tmp_path / "room.sqlite3")
    span = {"stage": "decode", "segment": 0}
    size = len(json.dumps([span], separators=(",", ":")))
    traces = SharedTraces(db, room="r", capacity=3, running_max_bytes=100 * size)
    written: Counter[str] = Counter()
    for n in range(RUNNING_PRUNE_EVERY):  # a span at a time, five rollouts in turn; the last write prunes
        rid = f"resp_{n % 5}"
        traces.share_running("key_a", rid, written[rid], [span])
        written[rid] += 1
    last_three = {f"resp_{(RUNNING_PRUNE_EVERY - k) % 5}" for k in (1, 2, 3)}
    kept = {rid: traces.spans("key_a", rid) for rid in written}
    assert {rid for rid, spans in kept.items() if spans is not None} == last_three
    assert all(kept[rid] == [span] * written[rid] for rid in last_three)  # each whole
    assert traces.after(0) == []  # never streamed

    by_bytes = SharedTraces(db, room="r", capacity=100, running_max_bytes=2 * size)
    for n in range(RUNNING_PRUNE_EVERY):
        by_bytes.share_running("key_a", f"resp_{n}", 0, [span])
    kept_ids = [n for n in range(RUNNING_PRUNE_EVERY) if by_bytes.spans("key_a", f"resp_{n}")]
    assert kept_ids == [RUNNING_PRUNE_EVERY - 2, RUNNING_PRUNE_EVERY - 1]
    pruned = "resp_0"  # it goes on running: its next spans alone are not its spans
    by_bytes.share_running("key_a", pruned, 1, [span])
    assert by_bytes.spans("key_a", pruned) is None
    db.close()
