"""The live traces endpoint: every finished response's spans, once, in order, to its own key only
(and to an instructor's key, labelled, never revealing the key); with ``?history=true``, the
finished responses the server keeps first, bounded in count and in bytes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI
from websockets.sync.client import connect

from labkit.api.owners import key_label
from labkit.client.launcher import LabkitServer
from labkit.client.trace_watch import TraceWatcher
from labkit.server.stores.trace_stream import TraceFeed, _events
from labkit.server.stores.traces import RecentTraces, event_json
from tests.helpers import server_spans

pytestmark = pytest.mark.slow  # servers of its own

MODEL = "labkit-spark"
TEACHER = "sk-teacher"


@pytest.fixture(scope="module")
def room() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local", "--instructor-key", TEACHER]) as srv:
        yield srv


def wait_for(watcher: TraceWatcher, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(watcher.traces) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return list(watcher.traces)


def three_responses(server: LabkitServer, key: str) -> list[str]:
    """One JSON response, one streamed over SSE, one over WebSocket mode."""
    ids = []
    with OpenAI(base_url=server.base_url, api_key=key, max_retries=0) as client:
        ids.append(client.responses.create(model=MODEL, input="Say hello.").id)
        with client.responses.stream(model=MODEL, input="Say hello again.") as stream:
            ids.append(stream.get_final_response().id)
    with connect(server.ws_url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Hi.", "store": False}))
        while (event := json.loads(ws.recv(timeout=30)))["type"] != "response.completed":
            assert event["type"] != "error", event
        ids.append(event["response"]["id"])
    return ids


def test_each_key_sees_its_own_responses_once_in_order(room: LabkitServer) -> None:
    with (
        TraceWatcher(room.base_url, "sk-alice") as alice,
        TraceWatcher(room.base_url, "sk-bob") as bob,
        TraceWatcher(room.base_url, TEACHER) as teacher,
    ):
        alice_ids = three_responses(room, "sk-alice")
        bob_ids = three_responses(room, "sk-bob")
        seen_by_alice, seen_by_bob = wait_for(alice, 3), wait_for(bob, 3)
        seen_by_teacher = wait_for(teacher, 6)
        time.sleep(0.2)  # anything late or duplicated would arrive now
        assert len(alice.traces) == 3 and len(bob.traces) == 3 and len(teacher.traces) == 6

    assert [t["response_id"] for t in seen_by_alice] == alice_ids  # once each, as they finished
    assert [t["response_id"] for t in seen_by_bob] == bob_ids
    for trace in seen_by_alice:
        # the spans as the trace endpoint has them: every stage once, in the order they ran
        assert trace["spans"] == server_spans(room.base_url, trace["response_id"], key="sk-alice")
        assert trace["status"] == "completed" and trace["model"] == MODEL
        assert "owner" not in trace
    assert {t["design"] for t in seen_by_alice} == {"sprint", "websocket"}

    # the instructor sees everyone, each key under its own label, never the key or its digest
    labels = {t["response_id"]: t["owner"] for t in seen_by_teacher}
    assert set(labels) == set(alice_ids) | set(bob_ids)
    assert len({labels[i] for i in alice_ids}) == len({labels[i] for i in bob_ids}) == 1
    assert labels[alice_ids[0]] != labels[bob_ids[0]]
    assert "sk-alice" not in json.dumps(seen_by_teacher) and "key_" not in json.dumps(seen_by_teacher)


def test_a_refused_key_gets_a_401_in_the_error_shape() -> None:
    with LabkitServer(args=["--profile", "local", "--api-key", "sk-right"]) as srv:
        reply = httpx.get(
            f"{srv.base_url}/labkit/traces/stream", headers={"Authorization": "Bearer sk-wrong"}, timeout=10
        )
        assert reply.status_code == 401
        assert reply.json()["error"]["type"] == "authentication_error"
        with pytest.raises(RuntimeError, match="could not subscribe"):
            TraceWatcher(srv.base_url, "sk-wrong").start()
        with TraceWatcher(srv.base_url, "sk-right") as watcher:
            with OpenAI(base_url=srv.base_url, api_key="sk-right", max_retries=0) as client:
                rid = client.responses.create(model=MODEL, input="Hi.").id
            assert [t["response_id"] for t in wait_for(watcher, 1)] == [rid]


# ---------------------------------------------------------------- the history first (?history=true)


def data_ids(chunk: bytes) -> list[str]:
    """The response ids of the ``data:`` lines in a chunk of the stream."""
    return [json.loads(line[6:])["response_id"] for line in chunk.split(b"\n") if line.startswith(b"data: ")]


def create(server: LabkitServer, key: str, text: str) -> str:
    with OpenAI(base_url=server.base_url, api_key=key, max_retries=0) as client:
        return client.responses.create(model=MODEL, input=text).id


def history_then_live(
    server: LabkitServer, key: str, then: Callable[[], None] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Subscribe with ``?history=true`` and read the history, up to the ``: live`` line; then
    ``then()`` makes a response, and the next event is read. Returns (history, [live event's id])."""
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{server.base_url}/labkit/traces/stream?history=true"
    history: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15  # a safety net: keep-alive lines (every 10 s) never end a read
    with httpx.stream("GET", url, headers=headers, timeout=30) as reply:
        assert reply.status_code == 200
        lines = reply.iter_lines()
        assert next(lines) == ": subscribed"
        for line in lines:
            assert time.monotonic() < deadline, "no ': live' line: the server sent no history"
            if line == ": live":
                break
            if line.startswith("data: "):
                history.append(json.loads(line[len("data: ") :]))
        if then is None:
            return history, []
        then()
        live = next(json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: "))
    return history, [live["response_id"]]


def test_history_first_oldest_first_then_live_each_once(room: LabkitServer) -> None:
    carol, dave = "sk-carol", "sk-dave"
    before = [create(room, carol, "Before 1."), create(room, carol, "Before 2.")]
    before.append(create(room, dave, "Dave's."))
    after: list[str] = []

    def one_more() -> None:
        after.append(create(room, carol, "After."))

    history, live = history_then_live(room, carol, one_more)
    assert [t["response_id"] for t in history] == before[:2]  # its own, oldest first
    assert all("owner" not in t for t in history) and history[0]["spans"][-1]["stage"] == "billing"
    assert live == after  # then the live one, once

    history, _ = history_then_live(room, TEACHER)  # everyone's: the module's other responses too
    ids = [t["response_id"] for t in history]
    assert len(ids) == len(set(ids)) and [rid for rid in ids if rid in before] == before
    labels = {t["response_id"]: t.get("owner") for t in history}
    assert [labels[rid] for rid in before] == [key_label(carol)] * 2 + [key_label(dave)]
    assert ids[-1] == after[0]  # the newest, and nothing from after the subscription


def test_history_other_than_true_or_false_is_a_400(room: LabkitServer) -> None:
    url = f"{room.base_url}/labkit/traces/stream?history=yes"
    reply = httpx.get(url, headers={"Authorization": "Bearer sk-x"}, timeout=10)
    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "message": "Invalid 'history': expected 'true' or 'false'.",
        "type": "invalid_request_error",
        "param": "history",
        "code": None,
    }


def test_the_history_keeps_the_last_max_traces_responses() -> None:
    with LabkitServer(args=["--profile", "local", "--max-traces", "3"]) as srv:
        ids = [create(srv, "sk-a", f"Hi {n}.") for n in range(5)]
        with TraceWatcher(srv.base_url, "sk-a", history=True) as watcher:
            assert watcher.caught_up.is_set() and [t["response_id"] for t in watcher.traces] == ids[2:]


def test_the_history_in_memory_is_bounded_in_bytes() -> None:
    """The events' JSON together stays within the bound, the oldest going first; a replay sends
    what is kept and the subscriber may see, in order, each once, labelled as the live ones are."""
    spans = [{"stage": "decode", "start": 1.0, "end": 2.0, "detail": {"note": "x" * 200}}]
    size = len(event_json({"response_id": "resp_00", "spans": spans}))
    history = RecentTraces(capacity=100, max_bytes=3 * size + size // 2)  # room for three
    for n in range(10):
        history.append("key_a", {"response_id": f"resp_{n:02d}", "spans": spans})
        assert history.bytes <= history.max_bytes
    assert len(history) == 3 and history.bytes == 3 * size
    assert history.after(0)[0].event.startswith('{"response_id":"resp_07"')
    history.append("key_a", {"response_id": "resp_huge", "spans": spans * 10})  # alone past the bound
    assert len(history) == 0 and history.bytes == 0

    for n in range(10, 13):
        history.append("key_a" if n % 2 else "key_b", {"type": "trace", "response_id": f"resp_{n}"})

    async def replay(owner: str, sees_everyone: bool) -> list[bytes]:
        feed = TraceFeed()
        subscriber = feed.subscribe(owner, sees_everyone=sees_everyone, after=history.last())
        for who in ("key_a", "key_b"):  # after it subscribed: live
            feed.publish(who, {"type": "trace", "response_id": f"resp_live_{who}"})
        chunks = []
        async for chunk in _events(feed, subscriber, history):
            chunks.append(chunk)
            if chunk == b": live\n\n":
                feed.close()  # the stream ends after the live events it holds
        return chunks

    teacher = asyncio.run(replay("key_t", True))
    assert teacher[0] == b": subscribed\n\n" and teacher[2] == b": live\n\n"
    assert data_ids(teacher[1]) == ["resp_10", "resp_11", "resp_12"]
    assert [data_ids(chunk) for chunk in teacher[3:5]] == [["resp_live_key_a"], ["resp_live_key_b"]]
    assert b"key_a" not in teacher[1] and b'"owner":"learner-' in teacher[1]  # a label, never the owner
    learner = asyncio.run(replay("key_b", False))
    assert data_ids(learner[1]) == ["resp_10", "resp_12"] and data_ids(learner[3]) == ["resp_live_key_b"]
