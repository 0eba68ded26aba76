"""The trace stream of ``labkit serve --workers 2``: every response once, in order per key, on any worker.

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
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from labkit.client.launcher import LabkitServer
from labkit.server.database import Database
from labkit.server.shared_traces import SharedFeed, SharedTraces
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
    """A trace-stream subscription on a connection of its own, read on a thread; its worker is known."""

    def __init__(self, server: LabkitServer, key: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=30)
        self.conn.request("GET", STREAM, headers={"authorization": f"Bearer {key}"})
        self.reply = self.conn.getresponse()
        assert self.reply.status == 200
        assert self.reply.readline() == b": subscribed\n"  # the subscription is live from here
        assert self.conn.sock is not None
        self.worker = worker_holding(server, self.conn.sock.getsockname()[1])
        self.traces: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
            for line in self.reply:
                if line.startswith(b"data: "):
                    self.traces.append(json.loads(line[len(b"data: ") :]))

    def ids(self) -> list[str]:
        return [trace["response_id"] for trace in self.traces]

    def close(self) -> None:
        if self.conn.sock is not None:
            with contextlib.suppress(OSError):
                self.conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the reading thread
        self._thread.join(timeout=5)
        self.conn.close()


def one_on_each_worker(server: LabkitServer, key: str, opened: list[Subscription]) -> list[Subscription]:
    """Subscribe until every worker holds one of ``key``'s subscriptions (extras are closed)."""
    workers = set(server.processes()[1:])
    chosen: dict[int, Subscription] = {}
    for _ in range(40):  # bounded: each new connection lands on either worker
        subscription = Subscription(server, key)
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


def test_a_subscriber_sees_what_finishes_after_it_subscribes(tmp_path: Path) -> None:
    """Two workers' feeds over one file, in one process: rows before a subscription are not sent."""

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        one, two = Database(tmp_path / "room.sqlite3"), Database(tmp_path / "room.sqlite3")
        other_room = SharedFeed(SharedTraces(one, room="another"))
        feed_one, feed_two = SharedFeed(SharedTraces(one, room="r")), SharedFeed(SharedTraces(two, room="r"))
        feed_one.publish("key_a", {"response_id": "resp_before", "spans": []})
        watching = feed_two.subscribe("key_a")
        teacher = feed_one.subscribe("key_t", sees_everyone=True)
        stranger = other_room.subscribe("key_a", sees_everyone=True)
        for n in range(3):  # alternately on each worker
            (feed_one if n % 2 else feed_two).publish("key_a", {"response_id": f"resp_{n}", "spans": []})
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


def test_traces_are_written_only_while_someone_may_see_them(tmp_path: Path) -> None:
    async def scenario() -> list[tuple[bool, bool]]:
        one, two = Database(tmp_path / "room.sqlite3"), Database(tmp_path / "room.sqlite3")
        here, there = SharedFeed(SharedTraces(one, room="r")), SharedFeed(SharedTraces(two, room="r"))
        seen = [(here.wants("key_a"), here.wants("key_b"))]
        ada = there.subscribe("key_a")  # on the other worker
        seen.append((here.wants("key_a"), here.wants("key_b")))
        teacher = there.subscribe("key_t", sees_everyone=True)
        seen.append((here.wants("key_a"), here.wants("key_b")))
        there.unsubscribe(teacher)
        there.unsubscribe(teacher)  # a second time changes nothing
        seen.append((here.wants("key_a"), here.wants("key_b")))
        there.unsubscribe(ada)
        seen.append((here.wants("key_a"), here.wants("key_b")))
        one.close()
        two.close()
        return seen

    assert asyncio.run(scenario()) == [
        (False, False),
        (True, False),
        (True, True),
        (True, False),
        (False, False),
    ]
