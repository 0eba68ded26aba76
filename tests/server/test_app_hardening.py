"""A room's server answers bad input in the API's own error shape, keeps serving, and stores
nothing forged: compaction items, appended input, ``stream_id`` on appends, instructor keys, and
what docs/appended.md says of refusals and paused rollouts. (Requests h11 cannot parse, oversized
headers included, are tested with the protocol that answers them, in test_network.py here.)

A real ``labkit serve`` on loopback with two keys; raw httpx and ``websockets`` clients, so
nothing is smoothed over by an SDK. Outcomes are read off the wire, never the clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from labkit.client.launcher import LabkitServer
from labkit.scenarios import FETCH_TOOL
from tests.helpers import (
    ERROR_KEYS,
    KEY_A,
    KEY_B,
    LEAK,
    RECV_TIMEOUT,
    TERMINAL,
    assert_api_error,
    assert_serving,
    bearer,
    strict_json,
)

pytestmark = pytest.mark.slow  # hardening

MODEL = "labkit-spark"
SCENARIO = "synthetic:turns=2,output_tokens=20,tool_tokens=50,instruction_tokens=100"
ASK = {"role": "user", "content": "Go on."}
NESTING = 200_000


@pytest.fixture(scope="module")
def room() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--profile", "local", "--api-key", KEY_A, "--api-key", KEY_B]) as srv:
        yield srv


# ---------------------------------------------------------------- compaction items, real and forged


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def owner_of(key: str) -> str:
    """The owner a key's responses belong to (docs/protocol.md: a digest of the key)."""
    return "key_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def sealed(payload_text: str, key: str) -> str:
    """``encrypted_content`` sealed as labkit seals it, for a payload of any text: what a client
    that knows the scheme can make for its own key."""
    body = b64(payload_text.encode())
    seal_key = hashlib.sha256(b"labkit compaction seal\0" + owner_of(key).encode()).digest()
    mac = b64(hmac.new(seal_key, f"lkc1.{body}".encode(), hashlib.sha256).digest())
    return f"lkc1.{body}.{mac}"


HOSTILE_PAYLOADS = {
    "infinity": '{"summary": "x", "calls": [], "items": 0, "tokens": Infinity, "tools": {}}',
    "overflow": '{"summary": "x", "calls": [], "items": 0, "tokens": 1e999, "tools": {}}',
    "nested": '{"summary": "x", "calls": ' + "[" * NESTING + "]" * NESTING + "}",
}


def compaction_item(room: LabkitServer, key: str = KEY_A) -> dict[str, Any]:
    """A real compaction item for ``key``: it stands for one call, ``call_real``."""
    window = [
        {"role": "user", "content": "Find the handler."},
        {"type": "function_call", "call_id": "call_real", "name": "fetch", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_real", "output": "found it"},
    ]
    reply = http_post(room, "/responses/compact", {"model": MODEL, "input": window}, key)
    assert reply.status_code == 200, reply.text[:300]
    return reply.json()["output"][-1]


def altered(item: dict[str, Any], payload_text: str) -> dict[str, Any]:
    """``item`` with its payload replaced and its seal kept."""
    prefix, _body, mac = item["encrypted_content"].split(".")
    return {**item, "encrypted_content": f"{prefix}.{b64(payload_text.encode())}.{mac}"}


def forged_item(room: LabkitServer, kind: str) -> dict[str, Any]:
    if kind in HOSTILE_PAYLOADS:  # sealed for the sender's own key: only parsing can refuse it
        return {
            "type": "compaction",
            "id": "cmp_forged",
            "encrypted_content": sealed(HOSTILE_PAYLOADS[kind], KEY_A),
        }
    if kind == "altered":  # a hostile payload behind a real seal: refused before it is parsed
        return {**altered(compaction_item(room), HOSTILE_PAYLOADS["nested"]), "id": "cmp_forged"}
    assert kind == "other_key"
    return {**compaction_item(room, KEY_B), "id": "cmp_forged"}


def assert_refused_compaction(error: dict[str, Any], index: int) -> None:
    assert error == {
        "message": "The encrypted content for item cmp_forged could not be verified.",
        "type": "invalid_request_error",
        "param": f"input[{index}].encrypted_content",
        "code": "invalid_encrypted_content",
    }


# ---------------------------------------------------------------- clients


def http_post(room: LabkitServer, path: str, body: dict[str, Any], key: str = KEY_A) -> httpx.Response:
    return httpx.post(f"{room.base_url}{path}", json=body, headers=bearer(key), timeout=30)


@contextmanager
def ws(room: LabkitServer, query: str = "") -> Iterator[ClientConnection]:
    with connect(room.ws_url + query, additional_headers=bearer(), max_size=None) as conn:
        yield conn


def send(conn: ClientConnection, kind: str, **fields: Any) -> None:
    conn.send(json.dumps({"type": kind, **fields}))


def until(conn: ClientConnection, *kinds: str) -> dict[str, Any]:
    """The first event of ``kinds`` or an error, every frame strict JSON."""
    while True:
        raw = conn.recv(timeout=RECV_TIMEOUT)
        assert isinstance(raw, str)
        event = strict_json(raw)
        if event["type"] in kinds or event["type"] == "error":
            return event


def ws_error(event: dict[str, Any], status: int = 400) -> dict[str, Any]:
    """The nested WebSocket error shape: the fields of §5, a string code, nothing leaked."""
    assert event["type"] == "error" and event["status"] == status, event
    assert set(event["error"]) == ERROR_KEYS and isinstance(event["error"]["code"], str)
    assert not LEAK.search(event["error"]["message"]), event
    return event["error"]


def rollout_body(**extra: Any) -> dict[str, Any]:
    """An appended rollout of one ``fetch`` call, then an answer; stored."""
    return {
        "model": MODEL,
        "tools": [FETCH_TOOL],
        "input": "Fetch one thing, then answer.",
        "metadata": {"labkit_scenario": SCENARIO},
        **extra,
    }


def start_rollout(conn: ClientConnection, **extra: Any) -> dict[str, Any]:
    """Create an appended rollout; its first pause."""
    send(conn, "response.create", **rollout_body(**extra))
    pause = until(conn, "response.done", *TERMINAL)
    assert pause["type"] == "response.done", pause
    return pause


def answers(pause: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "chunk"}
        for call in pause["pending_calls"]
    ]


def finish_rollout(conn: ClientConnection, pause: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Answer every pause until the rollout ends; the completed response."""
    event = pause
    while event["type"] == "response.done":
        send(conn, "response.append", response_id=pause["response_id"], input=answers(event), **extra)
        event = until(conn, "response.done", *TERMINAL)
    assert event["type"] == "response.completed", event
    return event["response"]


def stored_inputs(room: LabkitServer, response_id: str) -> list[dict[str, Any]]:
    reply = httpx.get(
        f"{room.base_url}/responses/{response_id}/input_items",
        params={"order": "asc", "limit": 100},
        headers=bearer(),
        timeout=30,
    )
    assert reply.status_code == 200, reply.text[:300]
    return reply.json()["data"]


# ---------------------------------------------------------------- 1. forged compaction payloads


@pytest.mark.parametrize("kind", [*HOSTILE_PAYLOADS, "altered", "other_key"])
@pytest.mark.parametrize("how", ["http", "sse", "compact", "websocket", "append"])
def test_a_forged_compaction_item_is_a_400_naming_it_everywhere(
    room: LabkitServer, how: str, kind: str
) -> None:
    item = forged_item(room, kind)
    if how in ("http", "sse", "compact"):
        path = "/responses/compact" if how == "compact" else "/responses"
        body = {"model": MODEL, "input": [item, ASK], "stream": how == "sse"}
        with httpx.Client(timeout=30, headers=bearer()) as http:  # one keep-alive connection
            reply = http.post(f"{room.base_url}{path}", json=body)
            assert_refused_compaction(assert_api_error(reply, 400), 0)
            assert_serving(room, http)  # the same connection still serves: it was not reset
        return
    if how == "websocket":
        with ws(room) as conn:
            send(conn, "response.create", model=MODEL, input=[item, ASK], store=False)
            assert_refused_compaction(ws_error(until(conn, *TERMINAL)), 0)
            send(conn, "response.create", model=MODEL, input="Still there?", store=False)
            assert until(conn, *TERMINAL)["type"] == "response.completed"
    else:
        with ws(room, "?design=appended") as conn:
            pause = start_rollout(conn)
            send(conn, "response.append", response_id=pause["response_id"], input=[*answers(pause), item])
            assert_refused_compaction(ws_error(until(conn, "response.done", *TERMINAL)), 1)
            response = finish_rollout(conn, pause)  # still paused: a valid append resumes it
        assert all(i["type"] != "compaction" for i in stored_inputs(room, response["id"]))
    assert_serving(room)


# ---------------------------------------------------------------- 2. appends run a create's item checks


def test_an_append_cannot_vouch_for_a_call_with_an_altered_compaction_item(room: LabkitServer) -> None:
    real = compaction_item(room)
    body = real["encrypted_content"].split(".")[1]
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["calls"].append("call_invented")
    forged = {**altered(real, json.dumps(payload)), "id": "cmp_forged"}
    with ws(room, "?design=appended") as conn:
        pause = start_rollout(conn)
        send(conn, "response.append", response_id=pause["response_id"], input=[forged, *answers(pause)])
        assert_refused_compaction(ws_error(until(conn, "response.done", *TERMINAL)), 0)
        response = finish_rollout(conn, pause)
    assert all(i["type"] != "compaction" for i in stored_inputs(room, response["id"]))
    # Nothing stored vouches for the invented call: a later create cannot answer it.
    later = {
        "model": MODEL,
        "previous_response_id": response["id"],
        "input": [{"type": "function_call_output", "call_id": "call_invented", "output": "x"}],
    }
    error = assert_api_error(http_post(room, "/responses", later), 400)
    assert (error["param"], error["code"]) == ("input[0].call_id", "invalid_value")
    assert_serving(room)


@pytest.mark.parametrize("stream_id", [None, "lane-a"])
def test_an_append_answering_no_call_is_refused_and_the_rollout_keeps_waiting(
    room: LabkitServer, stream_id: str | None
) -> None:
    lane = {"stream_id": stream_id} if stream_id else {}
    orphan = {"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}
    with ws(room, "?design=appended") as conn:
        pause = start_rollout(conn, **lane)
        send(conn, "response.append", response_id=pause["response_id"], input=[orphan], **lane)
        refusal = until(conn, "response.done", *TERMINAL)
        assert ws_error(refusal) == {
            "message": "No tool call found for function call output with call_id call_nowhere.",
            "type": "invalid_request_error",
            "param": "input[0].call_id",
            "code": "invalid_value",
        }
        assert refusal.get("stream_id") == stream_id  # an event of the lane (docs/appended.md, Errors)
        response = finish_rollout(conn, pause, **lane)
    assert "call_nowhere" not in {i.get("call_id") for i in stored_inputs(room, response["id"])}
    assert_serving(room)


# ---------------------------------------------------------------- 3. stream_id on response.append


@pytest.mark.parametrize("stream_id", [[1], {"a": 1}, 7, "not a lane"])
def test_an_append_with_a_malformed_stream_id_is_a_400_naming_it(room: LabkitServer, stream_id: Any) -> None:
    with ws(room, "?design=appended") as conn:
        pause = start_rollout(conn)
        send(
            conn,
            "response.append",
            response_id=pause["response_id"],
            input=answers(pause),
            stream_id=stream_id,
        )
        refusal = until(conn, "response.done", *TERMINAL)
        error = ws_error(refusal)
        assert (error["param"], error["code"]) == ("stream_id", "invalid_stream_id")
        assert "stream_id" not in refusal  # it answers the frame, which names no lane
        finish_rollout(conn, pause)  # the rollout kept waiting, and the socket serves
    assert_serving(room)


# ---------------------------------------------------------------- 4. instructor keys


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_non_ascii_instructor_key_is_one_line_and_exit_2(tmp_path: Path, how: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LABKIT_MODELS", "LABKIT_DATA")}
    args = [sys.executable, "-m", "labkit", "serve", "--port", "0", "--db", str(tmp_path / "r.sqlite3")]
    if how == "flag":
        args += ["--instructor-key", "sk-instructeur-\u00e9"]
    else:
        env["LABKIT_INSTRUCTOR_KEYS"] = "sk-fine,sk-instructeur-\u00e9"
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stdout + result.stderr
    assert "serving on" not in result.stdout  # refused before it listened
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("labkit serve: error:"), result.stderr
    assert "instructor key" in lines[0] and "printable ASCII" in lines[0]


# ---------------------------------------------------------------- 6. what docs/appended.md says


def test_docs_appended_claims_hold(room: LabkitServer) -> None:
    # An unknown design: a 400 in the API's shape on the upgrade, not a bare 403.
    with pytest.raises(InvalidStatus) as refused, ws(room, "?design=no_such_design"):
        pass
    assert refused.value.response.status_code == 400
    error = json.loads(refused.value.response.body)["error"]
    assert (error["param"], error["code"]) == ("x-labkit-design", "invalid_value")
    with ws(room, "?design=appended") as conn:
        # An error without a code of its own carries its type: never null over WebSocket.
        send(conn, "response.append", response_id="resp_nothing", input=[])
        assert ws_error(until(conn))["code"] == "invalid_request_error"
        # A paused rollout's spans so far are served.
        pause = start_rollout(conn)
        traces = httpx.get(
            f"{room.base_url}/labkit/traces",
            params={"response_id": pause["response_id"]},
            headers=bearer(),
            timeout=30,
        )
        assert traces.status_code == 200
        stages = {span["stage"] for span in traces.json()["data"]}
        assert {"validation", "hydration", "decode"} <= stages and "storage" not in stages
        finish_rollout(conn, pause)
    assert_serving(room)
