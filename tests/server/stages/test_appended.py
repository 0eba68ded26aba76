"""The appended-rollout prototype (labkit extension, ``docs/appended.md``) over a raw WebSocket.

One ``response.create`` starts a whole agent rollout as ONE response. Sampling pauses
at each function call with a ``response.done`` event; the client runs the tool and
sends ``response.append``; sampling resumes in the same response. Checked here: the
event shapes and numbering the client sees, and the mechanism behind them read from
the server's spans (pre-inference stages once, post-inference stages once, only the
appended items rendered per segment) and from the billing ledger. No wall-clock
assertions.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from labkit.api.extensions import DESIGN_HEADER
from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer
from labkit.engine.render import GENERATION_PROMPT, encode_block, item_block
from labkit.engine.safety import classifier_texts, scan
from labkit.paths import default_data_dir
from labkit.scenarios import FETCH_TOOL, synthetic
from labkit.text.passage import text_of_tokens
from tests.helpers import auth_headers, server_spans

pytestmark = pytest.mark.slow  # servers of its own

MODEL = "labkit-spark"
TURNS = 3  # two pauses, then the final answer
SCENARIO = f"synthetic:turns={TURNS},output_tokens=20,tool_tokens=50,instruction_tokens=100"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
PRE_INFERENCE = ("connect", "upgrade", "auth", "hydration", "routing")
POST_INFERENCE = ("output_safety", "retain", "storage", "billing")
PER_SEGMENT = ("uplink", "validation", "input_safety", "render", "downlink", "queue", "prefill", "decode")


# ---------------------------------------------------------------- a raw client


class Socket:
    """A raw WebSocket that records every event it receives."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.ws.send(json.dumps({"type": kind, **fields}))

    def until(self, *kinds: str) -> list[dict[str, Any]]:
        """Events up to and including the first of ``kinds`` (or an error)."""
        got = []
        while True:
            event = json.loads(self.ws.recv(timeout=30))
            self.events.append(event)
            got.append(event)
            if event["type"] in kinds or event["type"] == "error":
                return got

    def create(self, **body: Any) -> list[dict[str, Any]]:
        self.send("response.create", **{**rollout_body(), **body})
        return self.until("response.done", *TERMINAL)

    def append(self, **fields: Any) -> list[dict[str, Any]]:
        self.send("response.append", **fields)
        return self.until("response.done", *TERMINAL)


def rollout_body() -> dict[str, Any]:
    """A create that replays the synthetic scenario: ``TURNS - 1`` calls to ``fetch``, then text."""
    return {
        "model": MODEL,
        "instructions": f"Session {uuid.uuid4().hex}. Fetch what you need, then answer.",
        "tools": [FETCH_TOOL],
        "input": "Work through the task.",
        "metadata": {"labkit_scenario": SCENARIO},
    }


def outputs_for(pause: dict[str, Any], text: str = text_of_tokens(50)) -> list[dict[str, Any]]:
    """The client's tool results for a pause: one ``function_call_output`` per pending call."""
    return [
        {"type": "function_call_output", "call_id": call["call_id"], "output": text}
        for call in pause["pending_calls"]
    ]


def open_socket(server: LabkitServer, query: str = "?design=appended", **headers: str) -> Socket:
    ws = connect(
        server.ws_url + query,
        additional_headers={**auth_headers(), **headers},
        open_timeout=10,
        max_size=None,
    )
    return Socket(ws)


def ledger_rows(server: LabkitServer, response_id: str, deadline_s: float = 10.0) -> list[tuple[Any, ...]]:
    """The response's ledger rows, polled until one appears (billing is overlapped) or time is up."""
    deadline = time.monotonic() + deadline_s
    while True:
        with sqlite3.connect(server.db) as conn:
            query = (
                "SELECT status, input_tokens, cached_tokens, output_tokens FROM billing WHERE response_id = ?"
            )
            rows = conn.execute(query, (response_id,)).fetchall()
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:  # shadows conftest's
    """A local-profile server (no modeled delays) whose SQLite file the tests read."""
    db = tmp_path_factory.mktemp("appended") / "labkit.sqlite3"
    with LabkitServer(db=db, args=["--profile", "local"]) as srv:
        yield srv


@dataclass
class Run:
    """One whole rollout over the raw socket: the events of each segment, and what was appended."""

    segments: list[list[dict[str, Any]]] = field(default_factory=list)
    appended: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e for segment in self.segments for e in segment]

    @property
    def pauses(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "response.done"]

    @property
    def response(self) -> dict[str, Any]:
        last = self.segments[-1][-1]
        assert last["type"] == "response.completed", last
        return last["response"]


@pytest.fixture(scope="module")
def run(server: LabkitServer) -> Run:
    result = Run()
    sock = open_socket(server)
    try:
        result.segments.append(sock.create())
        while result.segments[-1][-1]["type"] == "response.done":
            items = outputs_for(result.segments[-1][-1])
            result.appended.append(items)
            pause = result.segments[-1][-1]
            result.segments.append(sock.append(response_id=pause["response_id"], input=items))
    finally:
        sock.ws.close()
    return result


@pytest.fixture(scope="module")
def spans(server: LabkitServer, run: Run) -> list[dict[str, Any]]:
    return server_spans(server.base_url, run.response["id"])


# ---------------------------------------------------------------- opting in


@pytest.mark.parametrize("how", ["query", "header"])
def test_opt_in_pauses_at_the_first_call(server: LabkitServer, how: str) -> None:
    query, headers = ("?design=appended", {}) if how == "query" else ("", {DESIGN_HEADER: "appended"})
    sock = open_socket(server, query, **headers)
    with sock.ws:
        events = sock.create()
    assert events[-1]["type"] == "response.done"
    assert not set(TERMINAL) & set(types(events))


def test_standard_websocket_clients_never_see_the_extension(server: LabkitServer) -> None:
    sock = open_socket(server, "")
    with sock.ws:
        events = sock.create()
        assert events[-1]["type"] == "response.completed"  # a call ends the response, as standard
        assert "response.done" not in types(events)
        assert [i["type"] for i in events[-1]["response"]["output"]] == ["function_call"]
        sock.send("response.append", response_id=events[-1]["response"]["id"], input=[])
        error = sock.until()[-1]
        assert error["type"] == "error" and error["status"] == 400
        assert (error["error"]["param"], error["error"]["code"]) == ("type", "unknown_event")
        assert sock.create(input="And now?")[-1]["type"] == "response.completed"  # the socket survived


# ---------------------------------------------------------------- the events of one rollout


def test_the_whole_rollout_is_one_response(run: Run) -> None:
    assert len(run.segments) == TURNS
    assert types(run.events).count("response.created") == 1
    assert types(run.events).count("response.in_progress") == 1
    assert len(run.pauses) == TURNS - 1
    rid = run.events[0]["response"]["id"]
    assert {p["response_id"] for p in run.pauses} == {rid}
    assert run.response["id"] == rid
    assert types(run.events).count("response.completed") == 1


def test_pause_event_carries_the_pending_calls(run: Run) -> None:
    for segment in run.segments[:-1]:
        pause = segment[-1]
        assert set(pause) == {"type", "response_id", "status", "pending_calls", "sequence_number"}
        assert pause["status"] == "requires_action"
        done = [e["item"] for e in segment if e["type"] == "response.output_item.done"]
        assert pause["pending_calls"] == [i for i in done if i["type"] == "function_call"]
        assert [(c["name"], c["status"]) for c in pause["pending_calls"]] == [("fetch", "completed")]
        json.loads(pause["pending_calls"][0]["arguments"])
        assert segment[-2]["type"] == "response.output_item.done"  # paused right after the call


def test_append_resumes_with_continuing_indices_and_numbers(run: Run) -> None:
    numbers = [e["sequence_number"] for e in run.events]
    assert numbers == list(range(len(numbers)))  # one numbering for the whole response
    for index, segment in enumerate(run.segments):
        added = [e for e in segment if e["type"] == "response.output_item.added"]
        assert [e["output_index"] for e in added] == [index]  # each segment adds the next item
        indices = {e["output_index"] for e in segment if "output_index" in e}
        assert indices == {index}
    for segment in run.segments[1:]:
        assert segment[0]["type"] == "response.output_item.added"  # no second created/in_progress


def test_final_completed_holds_every_segment(run: Run) -> None:
    response = run.response
    done = [e["item"] for e in run.events if e["type"] == "response.output_item.done"]
    assert response["output"] == done
    assert [i["type"] for i in response["output"]] == ["function_call"] * (TURNS - 1) + ["message"]
    assert response["status"] == "completed"
    usage = response["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


# ---------------------------------------------------------------- the mechanism, from the spans


def test_pre_inference_once_post_inference_once(run: Run, spans: list[dict[str, Any]]) -> None:
    last = TURNS - 1
    for stage in PRE_INFERENCE:
        assert [s["segment"] for s in spans if s["stage"] == stage] == [0], stage
    for stage in POST_INFERENCE:
        assert [s["segment"] for s in spans if s["stage"] == stage] == [last], stage
    for stage in PER_SEGMENT:
        assert [s["segment"] for s in spans if s["stage"] == stage] == list(range(TURNS)), stage
    assert not [s for s in spans if s["stage"] == "intermediary"]
    safety = next(s for s in spans if s["stage"] == "output_safety")
    assert safety["items"] == len(run.response["output"])  # all outputs, scanned once
    billing = next(s for s in spans if s["stage"] == "billing")
    assert billing["detail"]["overlapped"] is True


def test_each_segment_renders_only_what_was_appended(run: Run, spans: list[dict[str, Any]]) -> None:
    renders = [s for s in spans if s["stage"] == "render"]
    validations = [s for s in spans if s["stage"] == "validation"]
    assert renders[0]["tokens"] == renders[0]["detail"]["prompt_tokens"]  # the first: everything
    for k in range(1, TURNS):
        appended, calls = run.appended[k - 1], run.pauses[k - 1]["pending_calls"]
        assert validations[k]["items"] == renders[k]["items"] == len(appended)
        # The sampled calls' markup and headers (their bodies are already ids) + the appended blocks.
        headers = sum(len(encode_block(item_block(c)[0], [])) for c in calls)
        blocks = sum(len(encode_block(*item_block(i))) for i in appended)
        assert renders[k]["tokens"] == headers + blocks
        # Appended to the same buffer: the prompt grows by the call's whole block and the outputs.
        decoded = next(s for s in spans if s["stage"] == "decode" and s["segment"] == k - 1)["tokens"]
        assert renders[k]["detail"]["prompt_tokens"] == (
            renders[k - 1]["detail"]["prompt_tokens"] + decoded + renders[k]["tokens"]
        )


def test_each_segment_classifies_only_what_was_appended(run: Run, spans: list[dict[str, Any]]) -> None:
    scans = [s for s in spans if s["stage"] == "input_safety"]
    for k in range(1, TURNS):
        appended = run.appended[k - 1]
        assert scans[k]["items"] == len(appended)
        assert scans[k]["tokens"] == scan(classifier_texts(appended)).tokens


def test_usage_and_ledger_add_up_the_segments(
    server: LabkitServer, run: Run, spans: list[dict[str, Any]]
) -> None:
    prefills = [s for s in spans if s["stage"] == "prefill"]
    renders = [s for s in spans if s["stage"] == "render"]
    for prefill, render in zip(prefills, renders, strict=True):
        prompt = prefill["tokens"] + prefill["detail"]["cached_tokens"]
        assert prompt == render["detail"]["prompt_tokens"] + len(GENERATION_PROMPT)
    usage = run.response["usage"]
    assert usage["input_tokens"] == sum(p["tokens"] + p["detail"]["cached_tokens"] for p in prefills)
    assert usage["input_tokens_details"]["cached_tokens"] == sum(
        p["detail"]["cached_tokens"] for p in prefills
    )
    assert usage["output_tokens"] == sum(s["tokens"] for s in spans if s["stage"] == "decode")
    # Later segments reuse the KV of the earlier ones on the same replica.
    assert all(p["detail"]["cached_tokens"] > 0 for p in prefills[1:])
    expected = (
        "completed",
        usage["input_tokens"],
        usage["input_tokens_details"]["cached_tokens"],
        usage["output_tokens"],
    )
    assert ledger_rows(server, run.response["id"]) == [expected]


def test_a_resumed_segment_finds_what_it_sampled_in_the_prefix_cache(spans: list[dict[str, Any]]) -> None:
    """A waiting response keeps the KV of what it sampled, as a paused sequence does: the next
    segment's prefill finds every full block before the appended items in the cache, the
    outputs it sampled included, and reads only the rest (otherwise each segment would prefill
    the previous one's output again, and on long answers the prototype's lead would vanish)."""
    prefills = [s for s in spans if s["stage"] == "prefill"]
    renders = [s for s in spans if s["stage"] == "render"]
    block = 16  # the prefix cache's block size: a partial last block is never cached
    for k in range(1, TURNS):
        before_appended = renders[k]["detail"]["prompt_tokens"] - renders[k]["tokens"]
        assert prefills[k]["detail"]["cached_tokens"] >= before_appended // block * block


def test_stored_response_holds_all_outputs_and_tool_results(server: LabkitServer, run: Run) -> None:
    rid = run.response["id"]
    with httpx.Client(base_url=server.base_url, headers=auth_headers(), timeout=30) as http:
        stored = http.get(f"/responses/{rid}").json()
        inputs = http.get(f"/responses/{rid}/input_items", params={"order": "asc"}).json()["data"]
    assert stored["output"] == run.response["output"]
    assert [i["type"] for i in inputs] == ["message"] + ["function_call_output"] * (TURNS - 1)
    sent = [item["call_id"] for batch in run.appended for item in batch]
    assert [i["call_id"] for i in inputs[1:]] == sent


# ---------------------------------------------------------------- errors


def test_append_with_nothing_waiting_is_an_error_and_the_socket_survives(server: LabkitServer) -> None:
    sock = open_socket(server)
    with sock.ws:
        sock.send("response.append", response_id="resp_nothing", input=[])
        error = sock.until()[-1]
        assert error == {
            "type": "error",
            "status": 400,
            "error": {
                "message": "No response on this connection is waiting for response.append.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",  # no specific code: the type (always a string)
            },
        }
        first = sock.create()
        assert first[-1]["type"] == "response.done"  # the socket still serves rollouts


@pytest.mark.parametrize(
    ("items", "param", "code"),
    [
        ("not a list", "input", None),
        ([{"output": "no type"}], "input[0].type", "missing_required_parameter"),
        ([{"type": "function_call_output", "output": "no call id"}], "input[0].call_id", None),
        (["a string"], "input[0]", "invalid_type"),
    ],
)
def test_a_bad_append_is_refused_and_the_rollout_keeps_waiting(
    server: LabkitServer, items: Any, param: str, code: str | None
) -> None:
    sock = open_socket(server)
    with sock.ws:
        pause = sock.create()[-1]
        assert pause["type"] == "response.done"
        sock.send("response.append", response_id=pause["response_id"], input=items)
        error = sock.until()[-1]
        assert error["type"] == "error" and error["status"] == 400
        assert error["error"]["param"] == param
        if code is not None:
            assert error["error"]["code"] == code
        # Still paused: a valid append resumes the same response where it stopped.
        resumed = sock.append(response_id=pause["response_id"], input=outputs_for(pause))
        assert resumed[0]["sequence_number"] == pause["sequence_number"] + 1
        assert resumed[0]["output_index"] == 1
        while resumed[-1]["type"] == "response.done":
            resumed = sock.append(response_id=pause["response_id"], input=outputs_for(resumed[-1]))
        assert resumed[-1]["type"] == "response.completed"
        assert resumed[-1]["response"]["id"] == pause["response_id"]
    spans = server_spans(server.base_url, pause["response_id"])
    assert [s["segment"] for s in spans if s["stage"] == "validation"] == list(range(TURNS))


def test_an_append_naming_another_response_is_refused(server: LabkitServer) -> None:
    sock = open_socket(server)
    with sock.ws:
        pause = sock.create()[-1]
        sock.send("response.append", response_id="resp_someone_else", input=outputs_for(pause))
        reply = sock.until("response.done", *TERMINAL)[-1]
    assert reply["type"] == "error"
    assert reply["error"]["param"] == "response_id"


def test_lanes_route_appends_by_stream_id(server: LabkitServer) -> None:
    sock = open_socket(server)
    with sock.ws:
        pause = sock.create(stream_id="lane-a")[-1]
        assert pause["type"] == "response.done" and pause["stream_id"] == "lane-a"
        sock.send("response.append", response_id=pause["response_id"], input=outputs_for(pause))
        assert sock.until()[-1]["type"] == "error"  # the default lane has nothing waiting
        resumed = sock.append(response_id=pause["response_id"], stream_id="lane-a", input=outputs_for(pause))
        assert {e.get("stream_id") for e in resumed} == {"lane-a"}
        assert resumed[0]["output_index"] == 1


def test_an_abandoned_rollout_is_billed_once_as_cancelled(server: LabkitServer) -> None:
    sock = open_socket(server)
    with sock.ws:
        pause = sock.create()[-1]
        assert pause["type"] == "response.done"
    rows = ledger_rows(server, pause["response_id"])
    assert len(rows) == 1
    status, input_tokens, _, output_tokens = rows[0]
    assert status == "cancelled" and input_tokens > 0 and output_tokens > 0


def test_stopping_the_server_mid_rollout_bills_it_once_as_cancelled(tmp_path: Path) -> None:
    # No modeled delays but a 300 ms billing service: the charge is still queued at shutdown.
    local = (default_data_dir() / "profiles" / "local.toml").read_text()
    profile = tmp_path / "slow-billing.toml"
    profile.write_text(local.replace("[billing]\nhop_ms = 0", "[billing]\nhop_ms = 300"))
    assert profile.read_text() != local
    srv = LabkitServer(db=tmp_path / "labkit.sqlite3", args=["--profile", str(profile)]).start()
    try:
        sock = open_socket(srv)
        pause = sock.create()[-1]
        assert pause["type"] == "response.done"
        srv.stop()  # shutdown cancels the paused rollout, then drains the billing queue
        sock.ws.close()
    finally:
        srv.close()  # the database was given, so it stays
    with sqlite3.connect(tmp_path / "labkit.sqlite3") as conn:
        rows = conn.execute("SELECT response_id, status FROM billing").fetchall()
    assert rows == [(pause["response_id"], "cancelled")]


# ---------------------------------------------------------------- the agent loop over the extension


def test_a_full_rollout_takes_as_many_turns_as_websocket_mode(server: LabkitServer) -> None:
    scenario = synthetic(turns=6, output_tokens=20, tool_tokens=100, instruction_tokens=200)
    appended = Rollout.run(server.base_url, "appended", scenario, model=MODEL)
    websocket = Rollout.run(server.base_url, "websocket", scenario, model=MODEL)
    assert len(appended.records) == len(websocket.records) == scenario.turns
    assert [r.calls for r in appended.records] == [r.calls for r in websocket.records]
    assert len({r.response_id for r in appended.records}) == 1
    assert len({r.response_id for r in websocket.records}) == scenario.turns
    final = appended.records[-1].usage
    assert final is not None and final["output_tokens"] > 0
    spans = appended.spans[appended.records[0].response_id]
    assert sorted({s["segment"] for s in spans}) == list(range(scenario.turns))
