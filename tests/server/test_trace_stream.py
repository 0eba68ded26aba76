"""The live traces endpoint: every finished response's spans, once, in order, to its own key only
(and to an instructor's key, labelled, never revealing the key)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI
from websockets.sync.client import connect

from labkit.client.launcher import LabkitServer
from labkit.client.trace_watch import TraceWatcher
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
