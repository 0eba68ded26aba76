"""The API-service pipeline under each design, checked by its mechanism, never by the clock.

Every assertion reads what the server says it did (its spans: how many items and
tokens each stage processed, where the history came from, which replica served a
request) or what it wrote (billing ledger rows in SQLite), and compares that with
what the client really sent. Nothing here measures a duration: the designs differ
in *how much work* each stage does, and that is what is checked.

Most tests share four 10-turn rollouts of one synthetic scenario, run once against a
``--profile local`` server (no modeled delays, so they are fast). The transport each
rollout uses is wrapped to record every request it sent, so the expected counts are
computed from the real items, not from constants.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from conftest import API_KEY, auth_headers, by_stage, server_spans, two_http_turns
from openai import OpenAI
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from labkit import designs
from labkit.analysis.cost_model import predict
from labkit.analysis.frames import COLUMNS
from labkit.analysis.metrics import summary
from labkit.analysis.shape import Shape
from labkit.api.extensions import DESIGN_HEADER
from labkit.client import agent
from labkit.client.agent import Rollout
from labkit.client.transports import StatelessHTTP, Transport, TurnRequest, TurnResult
from labkit.engine.render import encode_block, item_block
from labkit.engine.tokenizer import encode_text
from labkit.paths import default_data_dir
from labkit.scenarios import synthetic
from labkit.server.handle import LabkitServer
from labkit.server.profiles import Network, Safety, load_profile
from labkit.server.safety import classifier_texts, scan

MODEL = "labkit-spark"
TURNS = 10
TOOL_TOKENS = 200
SCENARIO = synthetic(turns=TURNS, output_tokens=20, tool_tokens=TOOL_TOKENS, instruction_tokens=300)
# Sprint runs first, so it meets the fresh server's cold model-configuration cache.
DESIGNS = ("sprint", "naive", "websocket", "appended")
REPO_DATA = default_data_dir()
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
POLL_S = 10.0  # the longest any test waits for an overlapped ledger write


# ---------------------------------------------------------------- helpers


def block_tokens(items: list[dict[str, Any]]) -> int:
    """Tokens the chat template renders these items to (what a render stage encodes)."""
    return sum(len(encode_block(*item_block(item))) for item in items)


def scanned_tokens(items: list[dict[str, Any]]) -> int:
    """Tokens the safety classifier reads for these items."""
    return scan(classifier_texts(items)).tokens


def ledger(db: Path, response_id: str) -> list[tuple[Any, ...]]:
    """The ledger rows of one response: (status, input_tokens, cached_tokens, output_tokens)."""
    with sqlite3.connect(db) as conn:
        query = "SELECT status, input_tokens, cached_tokens, output_tokens FROM billing WHERE response_id = ?"
        return conn.execute(query, (response_id,)).fetchall()


def wait_for_rows(db: Path, response_ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Poll until every response has a ledger row (bounded), then return the rows."""
    deadline = time.monotonic() + POLL_S
    while True:
        rows = {rid: ledger(db, rid) for rid in response_ids}
        if all(rows.values()) or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def profile_with(tmp: Path, name: str, **sections: dict[str, float]) -> Path:
    """The local profile with some fields changed, written as ``tmp/name.toml``."""
    text = (REPO_DATA / "profiles" / "local.toml").read_text()
    for section, values in sections.items():
        for key, value in values.items():
            head = f"[{section}]\n{key} = "
            start = text.index(head) + len(head)
            end = text.index("\n", start)
            text = text[:start] + str(value) + text[end:]
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return path


def unique_instructions() -> str:
    return f"Session {uuid.uuid4().hex}. You are a careful coding agent. " + "Read before you write. " * 20


def one_turn(transport: StatelessHTTP, text: str = "Say hello.") -> TurnResult:
    user = {"type": "message", "role": "user", "content": text}
    return transport.turn(
        TurnRequest(model=MODEL, instructions="Be brief.", tools=[], history=[user], new=[user])
    )


def ws_connect(server: LabkitServer, query: str = "", **headers: str) -> ClientConnection:
    return connect(
        server.ws_url + query,
        additional_headers={**auth_headers(), **headers},
        open_timeout=10,
        max_size=None,
    )


def ws_turn(ws: ClientConnection, **body: Any) -> dict[str, Any]:
    """One ``response.create`` on a raw socket; the terminal event's response."""
    ws.send(json.dumps({"type": "response.create", "model": MODEL, **body}))
    while True:
        event = json.loads(ws.recv(timeout=30))
        if event["type"] in TERMINAL:
            return event["response"]
        assert event["type"] != "error", event


# ---------------------------------------------------------------- the shared rollouts


class Recording:
    """A transport that remembers every request it sent and every result it got."""

    def __init__(self, inner: Transport, log: list[tuple[TurnRequest, TurnResult]]) -> None:
        self.inner, self.log, self.design = inner, log, inner.design

    def turn(self, request: TurnRequest) -> TurnResult:
        result = self.inner.turn(request)
        self.log.append((request, result))
        return result

    def close(self) -> None:
        self.inner.close()


@dataclass
class Observed:
    """One rollout: the client's records, the server's spans, and what was sent each turn."""

    design: str
    rollout: Rollout
    sent: list[TurnRequest] = field(default_factory=list)
    results: list[TurnResult] = field(default_factory=list)

    def spans(self, turn: int) -> list[dict[str, Any]]:
        spans = self.rollout.spans[self.rollout.records[turn].response_id]
        if self.design == "appended":  # one response; its turns are the spans' segments
            spans = [s for s in spans if s["segment"] == turn]
        return spans

    def stage(self, turn: int, name: str) -> dict[str, Any]:
        found = [s for s in self.spans(turn) if s["stage"] == name]
        assert len(found) == 1, f"{self.design} turn {turn}: {len(found)} '{name}' spans"
        return found[0]

    def stages(self, turn: int) -> list[str]:
        return [s["stage"] for s in self.spans(turn)]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:
    db = tmp_path_factory.mktemp("pipeline") / "ledger.sqlite3"
    with LabkitServer(db=db, args=["--profile", "local"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def observed(local: LabkitServer) -> dict[str, Observed]:
    runs: dict[str, Observed] = {}
    real_open = agent.open_transport
    with pytest.MonkeyPatch.context() as patch:
        for design in DESIGNS:
            log: list[tuple[TurnRequest, TurnResult]] = []
            patch.setattr(
                agent, "open_transport", lambda *a, log=log, **k: Recording(real_open(*a, **k), log)
            )
            rollout = Rollout.run(local.base_url, design, SCENARIO, model=MODEL)
            runs[design] = Observed(design, rollout, [r for r, _ in log], [r for _, r in log])
    return runs


def test_every_design_completes_the_scenario(observed: dict[str, Observed]) -> None:
    for design, run in observed.items():
        assert len(run.rollout.records) == TURNS, design
        assert [len(r.calls) for r in run.rollout.records] == [1] * (TURNS - 1) + [0], design
        assert run.results[-1].status == "completed", design
        # The client sends the whole history over HTTP, only the new items otherwise.
        for turn, request in enumerate(run.sent):
            assert len(request.history) == 1 + 2 * turn
            assert len(request.new) == 1


# ---------------------------------------------------------------- 1. what each stage processes


def test_a_rollout_records_the_stages_its_plan_names_and_the_cost_model_prices(
    observed: dict[str, Observed],
) -> None:
    """Turn by turn, for every design: the stages the server ran are the stages the cost model
    prices (both read the design's plan), and the size-dependent ones worked over what it says."""
    shape = Shape.of(SCENARIO)
    profile = load_profile("local", REPO_DATA)
    for design, run in observed.items():
        predicted = predict(design, profile, shape, decode_tps=1000, prefill_tps=50_000)
        plan = designs.DESIGNS[design].plan
        assert len(predicted) == len(run.rollout.records) == TURNS, design
        for turn, cost in enumerate(predicted):
            recorded = run.stages(turn)
            assert sorted(recorded) == sorted(cost.stages), (design, turn)
            assert sorted(recorded) == sorted(plan.stages_on(turn, last=turn == TURNS - 1)), (design, turn)
            for stage in ("input_safety", "render"):
                # The model counts rendered tokens; the classifier reads the text without the
                # template's special tokens, and random call ids tokenize to a few tokens more or
                # less: close, not equal. Whole history against new items differs far more.
                span = run.stage(turn, stage)
                slack = 12 + 20 * span["items"]
                assert cost.tokens[stage] == pytest.approx(span["tokens"], rel=0.05, abs=slack), (
                    design,
                    turn,
                    stage,
                )



def test_naive_scans_and_renders_the_whole_history_every_turn(observed: dict[str, Observed]) -> None:
    run = observed["naive"]
    safety_tokens, render_tokens = [], []
    for turn, request in enumerate(run.sent):
        safety, render = run.stage(turn, "input_safety"), run.stage(turn, "render")
        assert safety["items"] == len(request.history) == 1 + 2 * turn
        assert safety["tokens"] == scanned_tokens(request.history)
        assert render["detail"]["cache"] == "none"
        assert render["items"] == len(request.history)
        assert render["tokens"] == render["detail"]["prompt_tokens"]  # the whole prompt, every turn
        safety_tokens.append(safety["tokens"])
        render_tokens.append(render["tokens"])
    assert all(b > a for a, b in pairwise(safety_tokens))
    assert all(b > a for a, b in pairwise(render_tokens))
    # Each turn the history grows by a call and its ~200-token output, and all of it is redone.
    assert render_tokens[-1] - render_tokens[0] > (TURNS - 1) * TOOL_TOKENS


def test_websocket_scans_and_renders_only_the_new_items(observed: dict[str, Observed]) -> None:
    run = observed["websocket"]
    bodies = set()
    for turn, request in enumerate(run.sent):
        safety, render = run.stage(turn, "input_safety"), run.stage(turn, "render")
        if turn == 0:
            assert render["detail"]["cache"] == "miss"
            assert render["tokens"] == render["detail"]["prompt_tokens"]
            continue
        assert [item["type"] for item in request.new] == ["function_call_output"]
        assert safety["items"] == 1
        assert safety["tokens"] == scanned_tokens(request.new)
        assert render["detail"]["cache"] == "connection_cache"
        assert render["items"] == 1
        assert render["tokens"] == block_tokens(request.new)
        # Constant across turns: 3 markup tokens + the tool output; only the call id's header varies.
        header, _ = item_block(request.new[0])
        bodies.add(render["tokens"] - len(encode_text(header)))
        # The prompt still grows with the whole conversation: rendered tokens were appended to.
        before = run.spans(turn - 1)
        grown = (
            sum(by_stage(before)[stage]["tokens"] for stage in ("retain", "decode"))
            + by_stage(before)["render"]["detail"]["prompt_tokens"]
        )
        assert render["detail"]["prompt_tokens"] == grown + render["tokens"]
    assert bodies == {TOOL_TOKENS + 3}


# A rollout long enough that the history grows ~30x between its early and late follow-ups, while
# each turn adds the same: one tool output of LONG_TOOL_TOKENS and a call of 20 tokens.
LONG_TURNS = 40
LONG_TOOL_TOKENS = 1000
BLOCK = 16  # the local profile's prefix-cache block size


def test_a_websocket_follow_up_works_only_on_what_is_new(local: LabkitServer) -> None:
    """Render, prefill and retain of a connection-cached follow-up touch only the new blocks and
    items, counted by the server (blocks hashed, cache entries touched, ids copied), the same at
    ~40k tokens of history as at ~2k: nothing in them grows with the conversation."""
    scenario = synthetic(
        turns=LONG_TURNS, output_tokens=20, tool_tokens=LONG_TOOL_TOKENS, instruction_tokens=0
    )
    rollout = Rollout.run(local.base_url, "websocket", scenario, model=MODEL)
    assert len(rollout.records) == LONG_TURNS
    counts, prompts = [], []
    for record in rollout.records[1:]:
        spans = by_stage(rollout.spans[record.response_id])
        render, prefill, retain = spans["render"], spans["prefill"], spans["retain"]
        assert render["detail"]["cache"] == "connection_cache"
        assert render["items"] == 1  # the tool output: the only new item
        assert render["detail"]["copied_ids"] == 0  # the history's ids are shared, not copied
        assert retain["detail"]["copied_ids"] == 0  # ... and so is the render cache's entry
        assert retain["detail"]["hashed_items"] == 2  # the render cache's hash: last output + new item
        # The prompt adds the new item's block and the 2-token generation prompt; the blocks after
        # the keys retained last turn are hashed (once to look up, once to insert), nothing else.
        new_blocks = (render["tokens"] + 2) // BLOCK + 1
        assert prefill["detail"]["hashed_blocks"] <= 2 * new_blocks
        assert prefill["detail"]["touched_blocks"] <= new_blocks + 8  # a few probes and refreshes
        # Retain adds the sampled output's block to the same buffer: again only the new blocks.
        grown = render["tokens"] + retain["tokens"] + spans["decode"]["tokens"]
        assert retain["detail"]["hashed_blocks"] <= grown // BLOCK + 1
        assert retain["detail"]["touched_blocks"] <= retain["detail"]["hashed_blocks"] + 4
        counts.append(
            (
                prefill["detail"]["hashed_blocks"],
                prefill["detail"]["touched_blocks"],
                retain["detail"]["hashed_blocks"],
                retain["detail"]["touched_blocks"],
            )
        )
        prompts.append(render["detail"]["prompt_tokens"])
    assert prompts[-1] > 20 * prompts[0]  # the history grew twentyfold and more ...
    early, late = counts[:5], counts[-5:]
    # ... and the work per turn did not, beyond a block or two where the new tokens straddle a
    # block boundary differently (against ~2,400 blocks more history).
    for column in range(4):
        assert max(c[column] for c in late) <= max(c[column] for c in early) + 4, column


def test_sprint_renders_from_the_render_cache_but_scans_everything(observed: dict[str, Observed]) -> None:
    run = observed["sprint"]
    for turn, request in enumerate(run.sent):
        safety, render = run.stage(turn, "input_safety"), run.stage(turn, "render")
        assert safety["items"] == len(request.history)
        assert safety["tokens"] == scanned_tokens(request.history)
        if turn == 0:
            assert render["detail"]["cache"] == "miss"
            continue
        assert render["detail"]["cache"] == "render_cache"
        assert render["detail"]["copied_ids"] == 0  # a view of the cached buffer, extended in place
        # The cached prefix covers everything up to the model's own call; only the tool output is new.
        assert render["items"] == len(request.new) == 1
        assert render["tokens"] == block_tokens(request.new)
        assert render["tokens"] < render["detail"]["prompt_tokens"]


def test_hydration_source(observed: dict[str, Observed]) -> None:
    for design in ("naive", "sprint"):
        for turn in range(TURNS):
            hydration = observed[design].stage(turn, "hydration")
            assert (hydration["detail"]["source"], hydration["items"]) == ("none", 0), (design, turn)
    run = observed["websocket"]
    assert run.stage(0, "hydration")["detail"]["source"] == "none"
    for turn, request in enumerate(run.sent[1:], start=1):
        hydration = run.stage(turn, "hydration")
        assert hydration["detail"]["source"] == "connection_cache"
        assert hydration["items"] == len(request.history) - len(request.new)  # everything before


def test_routing_detail(observed: dict[str, Observed]) -> None:
    naive, sprint, websocket = observed["naive"], observed["sprint"], observed["websocket"]
    for turn in range(TURNS):
        assert naive.stage(turn, "routing")["detail"]["config_cache"] is False
        assert naive.stage(turn, "routing")["detail"]["replica"] == "replica-0"  # the profile's only one
    # Sprint ran first on a fresh server: a cold configuration cache, warm from then on.
    assert sprint.stage(0, "routing")["detail"]["config_cache"] is False
    for turn in range(1, TURNS):
        assert sprint.stage(turn, "routing")["detail"]["config_cache"] is True
    assert "replica" in websocket.stage(0, "routing")["detail"]
    for turn in range(1, TURNS):
        assert websocket.stage(turn, "routing")["detail"] == {"reused": True}


def test_intermediary_hop_only_in_naive(observed: dict[str, Observed]) -> None:
    for design, run in observed.items():
        for turn in range(TURNS):
            count = run.stages(turn).count("intermediary")
            assert count == (1 if design == "naive" else 0), (design, turn)


def test_billing_blocks_over_http_and_overlaps_on_sockets(observed: dict[str, Observed]) -> None:
    for design, run in observed.items():
        turns = [TURNS - 1] if design == "appended" else range(TURNS)
        for turn in turns:
            overlapped = run.stage(turn, "billing")["detail"]["overlapped"]
            assert overlapped is (design in ("websocket", "appended")), (design, turn)


# ---------------------------------------------------------------- 2. billing: one ledger row per response


def test_one_ledger_row_per_response_in_every_design(
    observed: dict[str, Observed], local: LabkitServer
) -> None:
    for design, run in observed.items():
        ids = list(dict.fromkeys(r.response_id for r in run.rollout.records))
        assert len(ids) == (1 if design == "appended" else TURNS), design
        rows = wait_for_rows(local.db, ids)
        final = {r.response_id: r for r in run.results if r.usage is not None}
        for rid in ids:
            assert len(rows[rid]) == 1, (design, rid, rows[rid])
            usage = final[rid].usage
            assert usage is not None
            expected = (
                "completed",
                usage["input_tokens"],
                usage["input_tokens_details"]["cached_tokens"],
                usage["output_tokens"],
            )
            assert rows[rid][0] == expected, design


@pytest.fixture(scope="module")
def slow_billing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """No modeled delays but a 300 ms billing service, so an overlapped charge is visibly pending."""
    return profile_with(tmp_path_factory.mktemp("profiles"), "slow-billing", billing={"hop_ms": 300})


@pytest.fixture(scope="module")
def billing_server(slow_billing: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:
    db = tmp_path_factory.mktemp("billing") / "ledger.sqlite3"
    with LabkitServer(db=db, args=["--profile", str(slow_billing)]) as srv:
        yield srv


@pytest.mark.parametrize("design", ["naive", "sprint"])
def test_blocking_designs_write_the_row_before_answering(billing_server: LabkitServer, design: str) -> None:
    reply = httpx.post(
        f"{billing_server.base_url}/responses",
        json={"model": MODEL, "input": "Say hello.", "store": False},
        headers={**auth_headers(), DESIGN_HEADER: design},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    response = reply.json()
    rows = ledger(billing_server.db, response["id"])  # no waiting: it must be there already
    assert rows == [("completed", response["usage"]["input_tokens"], 0, response["usage"]["output_tokens"])]
    billing = by_stage(server_spans(billing_server.base_url, response["id"]))["billing"]
    assert billing["detail"]["overlapped"] is False


@pytest.mark.parametrize("design", ["naive", "sprint"])
def test_sse_client_closing_after_completion_is_billed_once(
    billing_server: LabkitServer, design: str
) -> None:
    body = {"model": MODEL, "input": "Say hello.", "stream": True, "store": False}
    completed = None
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST",
            f"{billing_server.base_url}/responses",
            json=body,
            headers={**auth_headers(), DESIGN_HEADER: design},
        ) as reply,
    ):
        for line in reply.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: ") :])
                if event["type"] == "response.completed":
                    completed = event["response"]
                    break  # leave mid-stream: the socket closes without reading further
    assert completed is not None
    assert [row[0] for row in ledger(billing_server.db, completed["id"])] == ["completed"]


def test_ws_client_disconnecting_after_completion_is_billed_once(billing_server: LabkitServer) -> None:
    with ws_connect(billing_server, "?design=websocket") as ws:
        response = ws_turn(ws, input="Say hello.", store=False)
    # The socket is closed; the overlapped charge is still on its way to the ledger.
    rows = wait_for_rows(billing_server.db, [response["id"]])[response["id"]]
    assert [row[0] for row in rows] == ["completed"]
    billing = by_stage(server_spans(billing_server.base_url, response["id"]))["billing"]
    assert billing["detail"]["overlapped"] is True


def test_shutdown_drains_the_overlapped_billing_queue(slow_billing: Path, tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite3"
    srv = LabkitServer(db=db, args=["--profile", str(slow_billing)]).start()
    try:
        ids = []
        with ws_connect(srv) as ws:
            for i in range(5):  # five charges queue up behind a 300 ms billing service
                ids.append(ws_turn(ws, input=f"Say hello {i}.", store=False)["id"])
            srv.stop()  # right after the last completion, socket still open
    finally:
        srv.close()
    with sqlite3.connect(db) as conn:
        counts = {
            rid: conn.execute("SELECT COUNT(*) FROM billing WHERE response_id = ?", (rid,)).fetchone()[0]
            for rid in ids
        }
        total = conn.execute("SELECT COUNT(*) FROM billing").fetchone()[0]
    assert counts == dict.fromkeys(ids, 1)
    assert total == len(ids)


# ---------------------------------------------------------------- 3. the network model (production-like)


def test_new_connection_per_request_pays_the_handshake_every_time(server: LabkitServer) -> None:
    transport = StatelessHTTP(server.base_url, API_KEY, "sprint", fresh_connection=True)
    ids = [one_turn(transport).response_id for _ in range(3)]
    transport.close()
    for rid in ids:
        assert by_stage(server_spans(server.base_url, rid))["connect"]["detail"] == {"new_connection": True}


def test_keep_alive_client_pays_the_handshake_once(server: LabkitServer) -> None:
    transport = StatelessHTTP(server.base_url, API_KEY, "sprint")
    try:
        ids = [one_turn(transport).response_id for _ in range(3)]
    finally:
        transport.close()
    opened = [
        by_stage(server_spans(server.base_url, rid))["connect"]["detail"]["new_connection"] for rid in ids
    ]
    assert opened == [True, False, False]


def test_fresh_httpx_client_per_request_is_a_new_connection(server: LabkitServer) -> None:
    for _ in range(2):
        with httpx.Client(timeout=30) as http:
            reply = http.post(
                f"{server.base_url}/responses", json={"model": MODEL, "input": "Hi."}, headers=auth_headers()
            )
        assert reply.status_code == 200, reply.text
        connect_span = by_stage(server_spans(server.base_url, reply.json()["id"]))["connect"]
        assert connect_span["detail"]["new_connection"] is True


def raw_request_from(port: int, server: LabkitServer) -> str:
    """One HTTP/1.1 request over a new TCP connection bound to ``port``, then a reset (no TIME_WAIT)."""
    url = httpx.URL(server.base_url)
    host, server_port = url.host, url.port
    body = json.dumps({"model": MODEL, "input": "Hi.", "store": False}).encode()
    head = (
        f"POST /v1/responses HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.settimeout(30)
        sock.bind(("127.0.0.1", port))
        sock.connect((host, server_port))
        sock.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        header, rest = data.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":")[1])
            for line in header.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(rest) < length:
            rest += sock.recv(65536)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    return json.loads(rest)["id"]


def test_a_new_connection_from_a_reused_port_pays_the_handshake(server: LabkitServer) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ids = [raw_request_from(port, server) for _ in range(2)]  # two TCP connections, one after the other
    opened = [
        by_stage(server_spans(server.base_url, rid))["connect"]["detail"]["new_connection"] for rid in ids
    ]
    assert opened == [True, True]


def test_websocket_set_up_is_reported_with_the_first_response_only(server: LabkitServer) -> None:
    with ws_connect(server) as ws:
        first = ws_turn(ws, input="Say hello.", store=False)
        second = ws_turn(ws, input=[{"role": "user", "content": "Again."}], previous_response_id=first["id"])
        third = ws_turn(ws, input="Unrelated.", store=False)
    stages = [[s["stage"] for s in server_spans(server.base_url, r["id"])] for r in (first, second, third)]
    assert stages[0][:3] == ["connect", "upgrade", "auth"]
    assert by_stage(server_spans(server.base_url, first["id"]))["connect"]["detail"]["new_connection"] is True
    for later in stages[1:]:
        assert not {"connect", "upgrade", "auth"} & set(later), later


# ---------------------------------------------------------------- 4. routing (production-like: 4 replicas)


def conversation(client: OpenAI, turns: int, **options: Any) -> list[Any]:
    """Stateless turns of one conversation (whole history each time); the responses."""
    instructions, history, responses = unique_instructions(), [], []
    for i in range(turns):
        history.append({"role": "user", "content": f"Step {i}: say something short."})
        response = client.responses.create(
            model=MODEL, instructions=instructions, input=history, store=False, **options
        )
        responses.append(response)
        history += [{"role": "assistant", "content": response.output_text}]
    return responses


def replica_of(server: LabkitServer, response_id: str) -> str:
    return by_stage(server_spans(server.base_url, response_id))["routing"]["detail"]["replica"]


def test_prompt_cache_key_keeps_a_conversation_on_one_replica(client: OpenAI, server: LabkitServer) -> None:
    responses = conversation(client, 4, prompt_cache_key=f"conv-{uuid.uuid4().hex}")
    assert len({replica_of(server, r.id) for r in responses}) == 1
    assert responses[0].usage.input_tokens_details.cached_tokens == 0
    for later in responses[1:]:
        assert later.usage.input_tokens_details.cached_tokens > 0


def test_without_a_key_requests_round_robin_over_the_replicas(client: OpenAI, server: LabkitServer) -> None:
    assert load_profile("production-like", REPO_DATA).engine.replicas == 4
    responses = conversation(client, 4)
    assert sorted(replica_of(server, r.id) for r in responses) == [f"replica-{i}" for i in range(4)]
    # Each request met a replica that had never seen this conversation.
    assert [r.usage.input_tokens_details.cached_tokens for r in responses] == [0] * 4


def test_a_websocket_connection_stays_on_one_replica(server: LabkitServer) -> None:
    with ws_connect(server) as ws:
        # Independent responses without a cache key: over HTTP these would round-robin.
        ids = [ws_turn(ws, input=f"Hello {i}.", store=False)["id"] for i in range(4)]
        chained = ws_turn(ws, input="And again.", previous_response_id=ids[-1], store=False)["id"]
    assert len({replica_of(server, rid) for rid in ids}) == 1
    assert by_stage(server_spans(server.base_url, chained))["routing"]["detail"] == {"reused": True}


# ---------------------------------------------------------------- 5. design selection


def test_unknown_design_header_is_a_400(server: LabkitServer) -> None:
    reply = httpx.post(
        f"{server.base_url}/responses",
        json={"model": MODEL, "input": "Hi."},
        headers={**auth_headers(), DESIGN_HEADER: "turbo"},
        timeout=30,
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error",
        DESIGN_HEADER,
        "invalid_value",
    )
    assert "naive" in error["message"] and "appended" in error["message"]


@pytest.mark.parametrize("where", ["query", "header"])
def test_unknown_design_refuses_the_websocket_upgrade(server: LabkitServer, where: str) -> None:
    query, headers = ("?design=turbo", {}) if where == "query" else ("", {DESIGN_HEADER: "turbo"})
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(server, query, **headers)
    # A 400 in the API's error shape, naming the header (docs/protocol.md §3.1).
    assert refused.value.response.status_code == 400
    assert b'"param":"x-labkit-design"' in refused.value.response.body


def test_http_without_a_design_header_is_sprint(server: LabkitServer) -> None:
    first, second = two_http_turns(server.base_url)
    for spans in (first, second):
        assert "intermediary" not in [s["stage"] for s in spans]
        assert by_stage(spans)["billing"]["detail"]["overlapped"] is False
    assert by_stage(first)["render"]["detail"]["cache"] == "miss"
    assert by_stage(second)["render"]["detail"]["cache"] == "render_cache"
    assert by_stage(second)["routing"]["detail"]["config_cache"] is True


def test_websocket_without_a_design_is_websocket(server: LabkitServer) -> None:
    with ws_connect(server) as ws:
        first = ws_turn(ws, input="Say hello.", store=False)
        second = ws_turn(ws, input="More.", previous_response_id=first["id"], store=False)
    spans = by_stage(server_spans(server.base_url, second["id"]))
    assert spans["hydration"]["detail"]["source"] == "connection_cache"
    assert spans["render"]["detail"]["cache"] == "connection_cache"
    assert spans["billing"]["detail"]["overlapped"] is True
    assert "intermediary" not in spans


def test_serve_design_flag_changes_the_http_default() -> None:
    with LabkitServer(args=["--profile", "local", "--design", "naive"]) as srv:
        first, second = two_http_turns(srv.base_url)
        sprint_first, _ = two_http_turns(srv.base_url, **{DESIGN_HEADER: "sprint"})
    for spans in (first, second):
        stages = by_stage(spans)
        assert "intermediary" in stages
        assert stages["render"]["detail"]["cache"] == "none"
        assert stages["routing"]["detail"]["config_cache"] is False
    assert "intermediary" not in [s["stage"] for s in sprint_first]  # the header still wins


# ---------------------------------------------------------------- 6. profiles


@pytest.mark.parametrize("name", ["local", "production-like"])
def test_shipped_profiles_load(name: str) -> None:
    profile = load_profile(name, REPO_DATA)
    assert profile.name == name
    assert profile.engine.replicas >= 1 and profile.engine.block_size == 16
    if name == "local":
        assert profile.network.handshake_s() == 0 and profile.network.one_way_s() == 0
        assert profile.safety.cost_s(10_000, fast=False) == 0
        assert profile.billing.hop_ms == profile.intermediary.hop_ms == 0
    else:
        assert profile.network.rtt_ms == 20 and profile.engine.replicas == 4
        assert profile.network.handshake_s() == pytest.approx(0.040)
        assert profile.safety.cost_s(1000, fast=True) < profile.safety.cost_s(1000, fast=False)


def test_profile_by_path(tmp_path: Path) -> None:
    path = profile_with(tmp_path, "custom", billing={"hop_ms": 42})
    profile = load_profile(str(path), tmp_path)
    assert (profile.name, profile.billing.hop_ms) == ("custom", 42)


def test_profile_missing_field_is_named(tmp_path: Path) -> None:
    text = (REPO_DATA / "profiles" / "local.toml").read_text().replace("fast_ms_per_1k_tokens = 0\n", "")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "broken.toml").write_text(text)
    with pytest.raises(ValueError, match=r"\[safety\] lacks fast_ms_per_1k_tokens"):
        load_profile("broken", tmp_path)


def test_profile_missing_section_is_named(tmp_path: Path) -> None:
    text = (REPO_DATA / "profiles" / "local.toml").read_text().replace("[intermediary]\nhop_ms = 0\n", "")
    path = tmp_path / "partial.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"lacks the \[intermediary\] section"):
        load_profile(str(path), tmp_path)


def test_unknown_profile_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown profile 'nowhere'") as err:
        load_profile("nowhere", tmp_path)
    assert "local" in str(err.value) and "production-like" in str(err.value)


def test_safety_cost_formula() -> None:
    safety = Safety(hop_ms=10, ms_per_1k_tokens=1.0, fast_hop_ms=4, fast_ms_per_1k_tokens=0.3)
    # Standard: 10 ms hop + 2.5k tokens * 1.0 ms/1k = 12.5 ms. Fast: 4 + 2.5 * 0.3 = 4.75 ms.
    assert safety.cost_s(2500, fast=False) == pytest.approx(0.0125)
    assert safety.cost_s(2500, fast=True) == pytest.approx(0.00475)
    assert safety.cost_s(0, fast=False) == pytest.approx(0.010)


def test_network_handshake_formula() -> None:
    # TCP (1 round trip) + TLS 1.2 (2 round trips) at 30 ms: 90 ms; half a round trip each way.
    network = Network(rtt_ms=30, tcp_handshake_round_trips=1, tls_handshake_round_trips=2)
    assert network.handshake_s() == pytest.approx(0.090)
    assert network.one_way_s() == pytest.approx(0.015)


# ---------------------------------------------------------------- 8. the rollout DataFrame and metrics


@pytest.mark.parametrize("design", DESIGNS)
def test_rollout_frame(observed: dict[str, Observed], design: str) -> None:
    run = observed[design]
    frame = run.rollout.frame()
    assert list(frame.columns) == [*COLUMNS, "t"]
    assert set(frame["design"]) == {design}
    assert set(frame["bucket"]) <= {"api", "inference", "client", "observer"}
    assert set(frame["source"]) == {"server", "client"}
    for stage in ("send", "done"):
        assert frame[frame["stage"] == stage].groupby("turn").size().to_dict() == dict.fromkeys(
            range(TURNS), 1
        )
    tools = frame[frame["stage"] == "tool"].groupby("turn").size()
    for record in run.rollout.records:
        assert tools.get(record.turn, 0) == len(record.calls)
        server = frame[(frame["turn"] == record.turn) & (frame["source"] == "server")]
        assert {"prefill", "decode"} <= set(server["stage"]), record.turn
    assert frame.loc[frame["stage"] == "tool", "bucket"].eq("client").all()
    assert frame.loc[frame["stage"].isin(["queue", "prefill", "decode"]), "bucket"].eq("inference").all()
    assert frame.loc[frame["stage"].isin(["render", "input_safety", "billing"]), "bucket"].eq("api").all()
    assert (frame["duration"] >= 0).all()
    assert frame.loc[frame["stage"] == "send", "t"].min() == 0
    # Output tokens of the final turn as the client saw them at ``done``.
    done = frame[(frame["stage"] == "done") & (frame["turn"] == TURNS - 1)]
    assert int(done["tokens"].iloc[0]) == run.results[-1].usage["output_tokens"]


@pytest.mark.parametrize("design", DESIGNS)
def test_summary_metrics(observed: dict[str, Observed], design: str) -> None:
    metrics = summary(observed[design].rollout.frame())
    assert metrics["e2e_s"] > 0
    assert 0 <= metrics["api_share"] <= 1
    assert metrics["turns"] == SCENARIO.turns == TURNS
    assert not pd.isna(metrics["ttft_mean_s"])


def test_the_synchronous_client_runs_inside_a_running_event_loop() -> None:
    """Notebooks run code inside the kernel's event loop: the server handle and the client
    must not need a loop of their own."""
    import asyncio

    async def in_a_kernel() -> dict[str, float]:
        with LabkitServer(args=["--profile", "local"]) as server:
            rollout = Rollout.run(
                server.base_url, "websocket", synthetic(turns=3, tool_tokens=50), model=MODEL
            )
            return summary(rollout.frame())

    assert asyncio.run(in_a_kernel())["turns"] == 3
