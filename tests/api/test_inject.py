"""The appended design over the official SDK's multi-agent beta (``docs/appended.md``), driven by
the SDK's beta connection, unmodified: ``client.beta.responses.connect()`` with the beta named in
the upgrade's ``OpenAI-Beta`` header, ``connection.response.create`` once, then
``connection.response.inject`` with the tool outputs at each function call.

Checked here: every event of a rollout parses as the SDK's beta server-event type (strictly); the
rollout is one response that waits at each call and resumes on the same response; each inject is
committed whole or refused whole, and no refused or returned inject changes what is stored; the
mechanism, read from the server's spans and its ledger; and the agent loop over both wires. No
wall-clock assertions.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from openai import OpenAI
from openai._models import validate_type
from openai.types.beta.beta_responses_server_event import BetaResponsesServerEvent
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from labkit import lab
from labkit.analysis.compare import run_designs
from labkit.api.extensions import DESIGN_HEADER
from labkit.client.agent import Rollout
from labkit.client.launcher import LabkitServer
from labkit.paths import default_data_dir
from labkit.scenarios import FETCH_TOOL, Scenario, synthetic
from labkit.server.app import ServerConfig, create_app
from labkit.text.passage import text_of_tokens
from tests.helpers import API_KEY, auth_headers, served_in_thread, server_spans

pytestmark = pytest.mark.slow  # servers of its own

MODEL = "labkit-spark"
TURNS = 3  # two calls, each waited for, then the final answer
SCENARIO = f"synthetic:turns={TURNS},output_tokens=20,tool_tokens=50,instruction_tokens=100"
BETA = {"OpenAI-Beta": "responses_multi_agent=v1"}
OTHER_KEY = "sk-labkit-someone-else"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
PER_SEGMENT = ["uplink", "validation", "input_safety", "render", "queue", "prefill", "downlink", "decode"]


# ---------------------------------------------------------------- the SDK's beta connection


def beta_connect(client: OpenAI, design: str = "appended") -> Any:
    return client.beta.responses.connect(extra_headers={**BETA, DESIGN_HEADER: design})


def create_body(scenario: str = SCENARIO) -> dict[str, Any]:
    return {
        "model": MODEL,
        "instructions": f"Session {uuid.uuid4().hex}. Fetch what you need, then answer.",
        "tools": [FETCH_TOOL],
        "input": "Work through the task.",
        "metadata": {"labkit_scenario": scenario},
    }


def receive(conn: Any) -> dict[str, Any]:
    """The next event as sent, once the SDK has parsed it as its beta server-event type."""
    raw = conn.recv_bytes()
    event = json.loads(raw)
    assert conn.parse_event(raw).type == event["type"]
    return event


def until(conn: Any, stop: Any) -> list[dict[str, Any]]:
    """Events up to the first that ``stop`` holds for, or an error, or a terminal one."""
    got = []
    while True:
        got.append(receive(conn))
        kind = got[-1]["type"]
        if stop(got[-1]) or kind == "error" or kind in TERMINAL:
            return got


def waiting_call(event: dict[str, Any]) -> bool:
    """A call's item is done: the response waits for its output."""
    return event["type"] == "response.output_item.done" and event["item"]["type"] == "function_call"


def output_for(call: dict[str, Any], text: str = text_of_tokens(50)) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call["call_id"], "output": text}


def input_items(client: OpenAI, response_id: str) -> list[dict[str, Any]]:
    listed = client.responses.input_items.list(response_id, order="asc")
    return [item.model_dump(mode="json", exclude_none=True, warnings=False) for item in listed.data]


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:  # shadows conftest's
    """A local-profile server (no modeled delays) whose SQLite file the tests read."""
    db = tmp_path_factory.mktemp("inject") / "labkit.sqlite3"
    with LabkitServer(db=db, args=["--profile", "local"]) as srv:
        yield srv


@pytest.fixture
def client(server: LabkitServer) -> Iterator[OpenAI]:  # shadows conftest's: this module's server
    with OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as c:
        yield c


@dataclass
class Run:
    """One whole rollout: every event in order, and the input injected at each call."""

    events: list[dict[str, Any]] = field(default_factory=list)
    injected: list[list[dict[str, Any]]] = field(default_factory=list)

    @property
    def response(self) -> dict[str, Any]:
        assert self.events[-1]["type"] == "response.completed", self.events[-1]
        return self.events[-1]["response"]


@pytest.fixture(scope="module")
def run(server: LabkitServer) -> Run:
    result = Run()
    with (
        OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as client,
        beta_connect(client) as conn,
    ):
        conn.response.create(**create_body(), store=True)
        while True:
            result.events += until(conn, waiting_call)
            if not waiting_call(result.events[-1]):
                break
            items = [output_for(result.events[-1]["item"])]
            result.injected.append(items)
            conn.response.inject(response_id=result.events[0]["response"]["id"], input=items)
    return result


@pytest.fixture(scope="module")
def spans(server: LabkitServer, run: Run) -> list[dict[str, Any]]:
    return server_spans(server.base_url, run.response["id"])


# ---------------------------------------------------------------- the wire


def test_every_event_of_a_rollout_parses_strictly_as_the_sdks_beta_server_event(run: Run) -> None:
    for event in run.events:
        parsed = validate_type(type_=BetaResponsesServerEvent, value=event)  # type: ignore[arg-type]
        assert parsed.type == event["type"]
    kinds = {e["type"] for e in run.events}
    assert {"response.inject.created", "response.function_call_arguments.delta"} <= kinds
    assert "response.done" not in kinds  # the prototype's pause is not the beta's


def test_the_whole_rollout_is_one_response_that_waits_at_each_call(run: Run) -> None:
    kinds = [e["type"] for e in run.events]
    assert kinds.count("response.created") == kinds.count("response.in_progress") == 1
    assert kinds.count("response.inject.created") == TURNS - 1 == len(run.injected)
    assert [e["sequence_number"] for e in run.events] == list(range(len(run.events)))
    response_id = run.response["id"]
    for i, event in enumerate(run.events):
        if waiting_call(event):  # the commit comes next, then the same response samples on
            ack, resumed = run.events[i + 1], run.events[i + 2]
            assert ack == {
                "type": "response.inject.created",
                "response_id": response_id,
                "sequence_number": event["sequence_number"] + 1,
            }
            assert resumed["type"] == "response.output_item.added"
            assert resumed["output_index"] == event["output_index"] + 1


def test_the_final_response_holds_every_segment_and_the_injected_input(client: OpenAI, run: Run) -> None:
    response = run.response
    assert [item["type"] for item in response["output"]] == ["function_call"] * (TURNS - 1) + ["message"]
    assert response["usage"]["output_tokens"] > 0
    stored = input_items(client, response["id"])
    assert [i["type"] for i in stored] == ["message"] + ["function_call_output"] * (TURNS - 1)
    assert [i["call_id"] for i in stored[1:]] == [items[0]["call_id"] for items in run.injected]


def test_pre_inference_once_post_inference_once(spans: list[dict[str, Any]]) -> None:
    by_segment: dict[int, list[str]] = {}
    for span in spans:
        by_segment.setdefault(span["segment"], []).append(span["stage"])
    assert sorted(by_segment) == list(range(TURNS))
    for stage in ("connect", "upgrade", "auth", "hydration", "routing"):
        assert [s for s in by_segment[0] if s == stage] == [stage]
    for segment in range(1, TURNS):
        assert by_segment[segment][: len(PER_SEGMENT)] == PER_SEGMENT
    for stage in ("output_safety", "retain", "storage", "billing"):
        assert [s["segment"] for s in spans if s["stage"] == stage] == [TURNS - 1]


def test_the_ledger_bills_the_rollout_once(server: LabkitServer, run: Run) -> None:
    deadline = time.monotonic() + 10
    while True:
        with sqlite3.connect(server.db) as db:
            rows = db.execute(
                "SELECT status FROM billing WHERE response_id = ?", (run.response["id"],)
            ).fetchall()
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert rows == [("completed",)]


# ---------------------------------------------------------------- injects refused or returned


def foreign_compaction(server: LabkitServer) -> dict[str, Any]:
    """A compaction item another key made (sealed for that key)."""
    with OpenAI(base_url=server.base_url, api_key=OTHER_KEY, max_retries=0) as other:
        compacted = other.responses.compact(model=MODEL, input="Remember the build command.")
    return compacted.model_dump(mode="json", exclude_none=True, warnings=False)["output"][-1]


REFUSED = {
    # what is injected with a valid output, and the error's param and code
    "orphan output": (
        lambda _: {"type": "function_call_output", "call_id": "call_nobody", "output": "?"},
        "input[1].call_id",
        "invalid_value",
    ),
    "another key's compaction item": (
        foreign_compaction,
        "input[1].encrypted_content",
        "invalid_encrypted_content",
    ),
    "malformed item": (lambda _: {"output": "no type"}, "input[1].type", "missing_required_parameter"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_inject_commits_nothing_and_the_response_keeps_waiting(
    server: LabkitServer, client: OpenAI, case: str
) -> None:
    make, param, code = REFUSED[case]
    bad = make(server)
    with beta_connect(client) as conn:
        conn.response.create(**create_body(), store=True)
        first = until(conn, waiting_call)
        response_id, call = first[0]["response"]["id"], first[-1]["item"]
        # All or nothing: the valid output beside the bad item is not committed either.
        conn.response.inject(response_id=response_id, input=[output_for(call, "refused"), bad])
        [error] = until(conn, lambda e: True)
        assert error["type"] == "error" and error["status"] == 400
        assert (error["error"]["param"], error["error"]["code"]) == (param, code)
        events = first
        while waiting_call(events[-1]):
            conn.response.inject(response_id=response_id, input=[output_for(events[-1]["item"])])
            events = until(conn, waiting_call)
        assert events[-1]["type"] == "response.completed"
    stored = input_items(client, response_id)
    assert [i["type"] for i in stored] == ["message"] + ["function_call_output"] * (TURNS - 1)
    assert "refused" not in {i.get("output") for i in stored}


def test_an_inject_into_a_finished_response_is_returned_and_changes_nothing(client: OpenAI) -> None:
    with beta_connect(client) as conn:
        conn.response.create(**create_body(), store=True)
        events = until(conn, waiting_call)
        response_id = events[0]["response"]["id"]
        while waiting_call(events[-1]):
            conn.response.inject(response_id=response_id, input=[output_for(events[-1]["item"])])
            events = until(conn, waiting_call)
        before = input_items(client, response_id)
        late = [output_for(events[-1]["response"]["output"][0], "too late")]
        conn.response.inject(response_id=response_id, input=late)
        failed = receive(conn)
    assert failed["type"] == "response.inject.failed"
    assert (failed["error"]["code"], failed["response_id"], failed["input"]) == (
        "response_already_completed",
        response_id,
        late,
    )
    assert input_items(client, response_id) == before


def test_an_inject_for_an_unknown_response_returns_the_input_as_sent(client: OpenAI, run: Run) -> None:
    """Unknown here: no such response, or one of another connection (finished or not, as for a
    steer, a connection knows only its own responses)."""
    sent = [
        {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "x"}]}
    ]
    before = input_items(client, run.response["id"])
    with beta_connect(client) as conn:
        for response_id in ("resp_unknown", run.response["id"]):
            conn.response.inject(response_id=response_id, input=sent)
            failed = receive(conn)
            assert failed["type"] == "response.inject.failed"
            assert (failed["error"]["code"], failed["response_id"], failed["input"]) == (
                "response_not_found",
                response_id,
                sent,
            )
    assert input_items(client, run.response["id"]) == before


# ---------------------------------------------------------------- the connection's wire


def test_without_the_beta_the_connection_speaks_the_prototypes_wire(server: LabkitServer) -> None:
    with connect(server.ws_url + "?design=appended", additional_headers=auth_headers()) as ws:
        ws.send(json.dumps({"type": "response.create", **create_body()}))
        kinds = []
        while not kinds or kinds[-1] not in ("response.done", *TERMINAL):
            kinds.append(json.loads(ws.recv(timeout=30))["type"])
        ws.send(json.dumps({"type": "response.inject", "response_id": "resp_x", "input": []}))
        error = json.loads(ws.recv(timeout=30))
    assert kinds[-1] == "response.done"
    assert (
        error["error"]["code"] == "unknown_event" and "responses_multi_agent=v1" in error["error"]["message"]
    )


def test_the_prototypes_wire_and_the_beta_header_together_are_refused_at_the_upgrade(
    server: LabkitServer,
) -> None:
    headers = {**auth_headers(), **BETA, DESIGN_HEADER: "appended+prototype_wire"}
    with pytest.raises(InvalidStatus) as refused:
        connect(server.ws_url, additional_headers=headers).close()
    assert refused.value.response.status_code == 400
    error = json.loads(refused.value.response.body)["error"]
    assert error["param"] == DESIGN_HEADER and "prototype_wire" in error["message"]


def test_a_websocket_mode_response_ends_on_its_call_and_returns_an_inject(client: OpenAI) -> None:
    with beta_connect(client, "websocket") as conn:
        conn.response.create(**create_body())
        completed = until(conn, lambda e: False)[-1]
        assert completed["type"] == "response.completed"
        call = completed["response"]["output"][-1]
        conn.response.inject(response_id=completed["response"]["id"], input=[output_for(call)])
        failed = receive(conn)
    assert failed["type"] == "response.inject.failed"
    assert failed["error"]["code"] == "response_already_completed"
    assert "previous_response_id" in failed["error"]["message"]


def test_steering_is_refused_and_names_inject(client: OpenAI) -> None:
    with beta_connect(client) as conn:
        conn.response.create(**create_body())
        response_id = until(conn, waiting_call)[0]["response"]["id"]
        conn.response.steer(previous_response_id=response_id, input="Use tabs.")
        failed = until(conn, lambda e: e["type"] == "response.steer.failed")[-1]
    assert failed["error"]["code"] == "steering_not_supported" and "inject" in failed["error"]["message"]


def test_a_named_lanes_commits_carry_its_stream_id(client: OpenAI) -> None:
    with beta_connect(client) as conn:
        conn.response.create(**create_body(), stream_id="lane-a")
        first = until(conn, waiting_call)
        conn.response.inject(response_id=first[0]["response"]["id"], input=[output_for(first[-1]["item"])])
        ack = receive(conn)
    assert ack["type"] == "response.inject.created" and ack["stream_id"] == "lane-a"
    assert {e.get("stream_id") for e in first} == {"lane-a"}


# ---------------------------------------------------------------- calls sampled together


PARALLEL = {
    "description": "Two fetches sampled together, then an answer.",
    "user": "Fetch both, then answer.",
    "steps": [
        {
            "calls": [
                {"name": "fetch", "arguments": {"note": "one"}},
                {"name": "fetch", "arguments": {"note": "two"}},
            ]
        },
        {"say": "Both fetched."},
    ],
}


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server in this process whose data holds a scenario of two calls in one step; its URL."""
    data = tmp_path_factory.mktemp("data")
    for entry in default_data_dir().iterdir():
        if entry.name != "scenarios":
            os.symlink(entry, data / entry.name)
    (data / "scenarios").mkdir()
    (data / "scenarios" / "parallel.json").write_text(json.dumps(PARALLEL))
    app = create_app(ServerConfig(db=str(data.parent / "labkit.sqlite3"), profile="local", data_dir=data))
    with served_in_thread(app) as url:
        yield f"{url}v1"


def test_calls_injected_one_by_one_resume_once_all_are_answered(parallel: str) -> None:
    with OpenAI(base_url=parallel, api_key=API_KEY, max_retries=0) as client, beta_connect(client) as conn:
        conn.response.create(**create_body("parallel"))
        events = until(conn, waiting_call)
        response_id = events[0]["response"]["id"]
        conn.response.inject(response_id=response_id, input=[output_for(events[-1]["item"])])
        events += until(conn, lambda e: e["type"] == "response.inject.created")  # the second call first
        second = [e for e in events if waiting_call(e)][1]
        conn.response.inject(response_id=response_id, input=[output_for(second["item"])])
        events += until(conn, lambda e: False)
    kinds = [e["type"] for e in events]
    assert kinds.count("response.inject.created") == 2
    first_ack = kinds.index("response.inject.created")
    assert kinds[first_ack + 1] == "response.inject.created"  # nothing sampled on half the answers
    assert [i["type"] for i in events[-1]["response"]["output"]] == [
        "function_call",
        "function_call",
        "message",
    ]
    # Each inject is a client request, so each starts a segment; only the one that completes the
    # answers samples.
    spans = server_spans(parallel, response_id)
    assert [s["stage"] for s in spans if s["segment"] == 1] == ["uplink", "validation"]
    assert [s["stage"] for s in spans if s["segment"] == 2][: len(PER_SEGMENT)] == PER_SEGMENT


def test_the_agent_loop_turns_line_up_with_the_segments_when_calls_come_together(parallel: str) -> None:
    scenario = Scenario("parallel", "", "", PARALLEL["user"], PARALLEL["steps"], tools=[FETCH_TOOL])
    rollout = Rollout.run(parallel, "appended", scenario, model=MODEL, api_key=API_KEY)
    assert [r.calls for r in rollout.records] == [["fetch"], ["fetch"], []]  # answered call by call
    frame = rollout.frame()
    server_turns = frame[frame["source"] == "server"].groupby("turn")["stage"].apply(list)
    assert list(server_turns.index) == [0, 1, 2]
    assert server_turns[1] == ["uplink", "validation"]


# ---------------------------------------------------------------- the agent loop over both wires


@pytest.mark.parametrize("design", ["appended", "appended+prototype_wire"])
def test_the_agent_loop_runs_a_rollout_over_either_wire_as_one_response(
    server: LabkitServer, design: str
) -> None:
    scenario = synthetic(turns=5, output_tokens=20, tool_tokens=100, instruction_tokens=200)
    rollout = Rollout.run(server.base_url, design, scenario, model=MODEL)
    assert len(rollout.records) == scenario.turns and len({r.response_id for r in rollout.records}) == 1
    frame = rollout.frame()
    assert sorted(frame["turn"].unique()) == list(range(scenario.turns))
    server_rows = frame[frame["source"] == "server"]
    for stage in ("hydration", "routing", "output_safety", "billing"):
        assert (server_rows["stage"] == stage).sum() == 1, stage
    for stage in ("validation", "input_safety", "render", "prefill", "decode"):
        assert sorted(server_rows[server_rows["stage"] == stage]["turn"]) == list(range(scenario.turns))


def test_both_wires_run_the_same_pipeline(server: LabkitServer) -> None:
    """The same scripted rollout over each wire: the same stages on every turn, the same calls
    and the same tokens; only the events that carry the tool outputs differ."""
    scenario = synthetic(turns=4, output_tokens=20, tool_tokens=60, instruction_tokens=100)
    seen = {}
    for design in ("appended", "appended+prototype_wire"):
        rollout = Rollout.run(server.base_url, design, scenario, model=MODEL)
        frame = rollout.frame()
        stages = frame[frame["source"] == "server"].groupby("turn")["stage"].apply(list).to_dict()
        usage = rollout.records[-1].usage or {}
        seen[design] = (stages, [r.calls for r in rollout.records], usage.get("output_tokens"))
    assert seen["appended"] == seen["appended+prototype_wire"]


# ---------------------------------------------------------------- three wires side by side


def test_the_three_wires_side_by_side(server: LabkitServer) -> None:
    table = lab.wire_events(server.base_url, API_KEY)
    prototype, launch, beta = (table[c] for c in table.columns)
    assert list(table.loc["2 · the client sends"]) == ["append", "create", "inject"]
    assert prototype.iloc[1].endswith("output_item.done → done")
    assert launch.iloc[1].endswith("output_item.done → completed") and launch.iloc[3].startswith("created")
    assert beta.iloc[1].endswith("output_item.done")  # no event says it waits
    assert beta.iloc[3].startswith("inject.created → output_item.added")
    assert all(column.iloc[3].endswith("completed") for column in (prototype, launch, beta))


def test_labkit_compare_runs_both_wires_by_name() -> None:
    rows = run_designs(
        tps=[1000],
        scenario="synthetic:turns=3,output_tokens=10,tool_tokens=30,instruction_tokens=50",
        profile="local",
        designs=["appended", "appended+prototype_wire"],
    )
    assert [(r.design, r.turns, r.runs) for r in rows] == [
        ("appended", 3, 1),
        ("appended+prototype_wire", 3, 1),
    ]
