"""Steering, terminal failures and ``context_management`` through the official ``openai`` SDK,
unmodified: ``connection.response.steer``, ``response.failed`` read as the SDK's own types,
and a response that compacts its input first.

A real ``labkit serve`` on loopback (and, for a failure injected into one stage, the app served in
this process). Order is read off the events; nothing measures wall-clock time.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import (
    ResponseCompactionItem,
    ResponseFailedEvent,
    ResponseSteerAcceptedEvent,
    ResponseSteerFailedEvent,
    ResponseSteerPendingEvent,
)
from openai.types.responses.responses_server_event import ResponseCompactionWsCompacting, ResponseWsFailed

from labkit.analysis.metrics import turns
from labkit.analysis.room import learner_turns
from labkit.api.stages import Stage
from labkit.client.frame import rollout_frame
from labkit.client.launcher import LabkitServer
from labkit.client.records import TurnRecord
from labkit.client.steering import STRATEGIES, correction_latency, summary
from labkit.connection_cache import ConnectionCache
from labkit.limits import MAX_PENDING_STEERS
from labkit.server.app import ServerConfig, create_app
from tests.helpers import API_KEY, READ_FILE_TOOL, auth_headers, served_in_thread, server_spans

pytestmark = pytest.mark.slow  # servers of its own

MODEL = "labkit-spark"
SLOW = "labkit-classic"  # 65 tokens/s: a long answer is surely still running when the steer lands
LONG = "Write a long essay about caching."
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
STEER = "Stop there. Just tell me which test fails."


def read_until(conn: Any, done: Callable[[Any], bool]) -> list[Any]:
    """Events up to and including the first for which ``done`` holds."""
    events = []
    for event in conn:
        events.append(event)
        if done(event):
            return events
    raise AssertionError(f"the connection closed early: {[e.type for e in events]}")


def terminal_of(response_id: str) -> Callable[[Any], bool]:
    return lambda e: e.type in TERMINAL and e.response.id == response_id


def finished(conn: Any, **create: Any) -> Any:
    conn.response.create(**create)
    events = read_until(conn, lambda e: e.type in TERMINAL or e.type == "error")
    assert events[-1].type in TERMINAL, events[-1]
    return events[-1].response


# ---------------------------------------------------------------- steering a long answer


def test_a_steer_redirects_a_long_answer_within_a_sentence(client: OpenAI, server: LabkitServer) -> None:
    with client.responses.connect() as conn:
        conn.response.create(model=SLOW, input=LONG, store=False, stream_id="agent")
        first = read_until(conn, lambda e: e.type == "response.output_text.delta")
        target = first[0].response.id
        conn.response.steer(previous_response_id=target, input=STEER)
        events = read_until(conn, lambda e: e.type in TERMINAL and e.response.id != target)

    [accepted] = [e for e in events if e.type == "response.steer.accepted"]
    assert isinstance(accepted, ResponseSteerAcceptedEvent)
    assert accepted.steer.previous_response_id == target and accepted.stream_id == "agent"
    steered = next(e for e in events if e.type == "response.incomplete")
    assert steered.response.id == target and steered.response.incomplete_details.reason == "steered"
    message = steered.response.output[0]
    assert message.status == "incomplete"
    text = message.content[0].text
    assert text.endswith("."), "it stops at a sentence's end, not in the middle of one"
    assert steered.response.usage.output_tokens < 200, "long before the answer's 2,048 tokens"

    created = [e for e in events if e.type == "response.created"]
    assert len(created) == 1 and created[0].response.previous_response_id == target
    successor = events[-1].response
    assert events[-1].type == "response.completed" and events[-1].stream_id == "agent"
    assert successor.model == SLOW and successor.store is False, "the steered response's settings"
    assert STEER in successor.output_text, "the model answers the steering message"

    # A follow-up served from the connection cache: pre-inference over the steering input only.
    spans = {s["stage"]: s for s in server_spans(server.base_url, successor.id)}
    assert spans["hydration"]["detail"]["source"] == "connection_cache"
    assert spans["render"]["items"] == 1
    assert "uplink" not in spans, "the server created it: no request crossed the network"


def test_a_steers_crossing_is_a_span_of_the_response_it_steers_beside_its_decode(
    client: OpenAI, server: LabkitServer
) -> None:
    """The steer's uplink (the profile's one-way delay, as a create's) is in the steered response's
    trace, named by the steer and ``overlapped``: it ran while the response decoded, so neither the
    turn's API time nor its span of time on the dashboard grows by it."""
    with client.responses.connect() as conn:
        sent = time.perf_counter()
        conn.response.create(model=SLOW, input=LONG, store=False)
        first = read_until(conn, lambda e: e.type == "response.output_text.delta")
        first_delta, target = time.perf_counter(), first[0].response.id
        conn.response.steer(previous_response_id=target, input=STEER)
        events = read_until(conn, terminal_of(target))
        done = time.perf_counter()
        read_until(conn, lambda e: e.type in TERMINAL and e.response.id != target)
    [accepted] = [e for e in events if e.type == "response.steer.accepted"]
    assert events[-1].response.incomplete_details.reason == "steered"

    spans = server_spans(server.base_url, target)
    request, crossing = (s for s in spans if s["stage"] == Stage.UPLINK)
    assert request["detail"] == {} and request["end"] <= first_delta
    assert crossing["detail"] == {"steer": accepted.steer.id, "overlapped": True}
    [decode] = [s for s in spans if s["stage"] == Stage.DECODE]
    assert decode["detail"]["stopped"] == "steered"
    assert decode["start"] < crossing["start"] < crossing["end"] <= decode["end"], "beside the decode it cut"

    # Each reader of a turn's spans gives the turn the same time with the crossing as without it.
    without = [s for s in spans if s is not crossing]
    record = TurnRecord("websocket", 0, target, sent, None, first_delta, first_delta, done)

    def timed(seen: list[dict[str, Any]]) -> tuple[list[float], list[list[float]]]:
        """The API time the metrics give the turn, and its times on the room's dashboard."""
        api = turns(rollout_frame("websocket", [record], {target: seen}))["api"]
        dashboard = learner_turns([{"response_id": target, "design": "websocket", "spans": seen}])
        return api.tolist(), dashboard[["start", "end", "ttft_s", "wall_s"]].values.tolist()

    assert timed(spans) == timed(without)


def test_steering_input_waits_for_the_results_of_client_owned_calls(client: OpenAI) -> None:
    with client.responses.connect() as conn:
        common = {"model": MODEL, "tools": [READ_FILE_TOOL], "store": True, "stream_id": "tools"}
        called = finished(conn, input="Read the README.", **common)
        [call] = called.output
        conn.response.steer(previous_response_id=called.id, input="Then also read setup.py.")
        accepted, pending = read_until(conn, lambda e: e.type == "response.steer.pending")
        assert isinstance(accepted, ResponseSteerAcceptedEvent) and isinstance(
            pending, ResponseSteerPendingEvent
        )
        assert pending.reason == "waiting_for_required_input" and pending.stream_id == "tools"
        assert pending.steer.id == accepted.steer.id
        [stub] = pending.required_input
        assert (stub.type, stub.call_id, stub.name) == ("function_call_output", call.call_id, "read_file")

        result = {"type": "function_call_output", "call_id": call.call_id, "output": "# README"}
        continued = finished(conn, input=[result], previous_response_id=called.id, **common)
    items = client.responses.input_items.list(continued.id, order="asc").data
    assert [item.type for item in items] == ["message", "function_call_output"], "the steer goes first"
    assert items[0].content[0].text == "Then also read setup.py."


def test_a_waiting_steers_crossing_joins_the_create_that_commits_it(
    client: OpenAI, server: LabkitServer
) -> None:
    """A steer on a response that waits for its client's calls crosses the network before the create
    that commits it: that crossing is a span of the committing response's trace, named by the steer
    and ``overlapped``, so the turn starts, on the dashboard, where its own request does."""
    with client.responses.connect() as conn:
        common = {"model": MODEL, "tools": [READ_FILE_TOOL], "store": True}
        called = finished(conn, input="Read the README.", **common)
        [call] = called.output
        conn.response.steer(previous_response_id=called.id, input="Then also read setup.py.")
        accepted, _ = read_until(conn, lambda e: e.type == "response.steer.pending")
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "# README"}
        continued = finished(conn, input=[result], previous_response_id=called.id, **common)

    spans = server_spans(server.base_url, continued.id)
    crossing, request = sorted((s for s in spans if s["stage"] == Stage.UPLINK), key=lambda s: s["start"])
    assert crossing["detail"] == {"steer": accepted.steer.id, "overlapped": True}
    assert request["detail"] == {} and crossing["end"] <= request["start"], "it crossed before the create"

    def dashboard(seen: list[dict[str, Any]]) -> list[list[float]]:
        return learner_turns([{"response_id": continued.id, "design": "websocket", "spans": seen}])[
            ["start", "end", "ttft_s", "wall_s"]
        ].values.tolist()

    assert dashboard(spans) == dashboard([s for s in spans if s is not crossing])


# ---------------------------------------------------------------- each failure, one by one


def failed_steer(conn: Any, target: str, steer_input: Any, returned: Any = None) -> ResponseSteerFailedEvent:
    """The steer's failure; its input comes back as it was sent (or as ``returned``, when given)."""
    conn.response.steer(previous_response_id=target, input=steer_input)
    event = read_until(conn, lambda e: e.type.startswith("response.steer."))[-1]
    assert isinstance(event, ResponseSteerFailedEvent), event
    assert event.error.type == "invalid_request_error" and event.error.message
    expected = steer_input if returned is None else returned
    assert event.steer.input == expected, "the uncommitted input comes back as it was sent"
    return event


def test_response_not_found(client: OpenAI) -> None:
    with client.responses.connect() as conn:
        failed = failed_steer(conn, "resp_not_on_this_connection", "Hello?")
    assert failed.error.code == "response_not_found" and failed.steer.id is None


def test_invalid_input(client: OpenAI) -> None:
    with client.responses.connect() as conn:
        conn.response.create(model=SLOW, input=LONG, store=False, max_output_tokens=600)
        target = read_until(conn, lambda e: e.type == "response.created")[0].response.id
        not_a_user = [{"type": "message", "role": "assistant", "content": "I will."}]
        failed = failed_steer(conn, target, not_a_user, returned="")  # not steering input: not returned
        assert failed.error.code == "invalid_input" and failed.steer.id is None
        ended = read_until(conn, terminal_of(target))[-1]
    assert ended.response.incomplete_details.reason == "max_output_tokens", (
        "the refused steer changed nothing"
    )


def test_too_many_pending_steers(client: OpenAI) -> None:
    with client.responses.connect() as conn:
        called = finished(conn, model=MODEL, input="Read the README.", tools=[READ_FILE_TOOL], store=False)
        for i in range(MAX_PENDING_STEERS):
            conn.response.steer(previous_response_id=called.id, input=f"Note {i}.")
            read_until(conn, lambda e: e.type == "response.steer.pending")
        failed = failed_steer(conn, called.id, "One too many.")
    assert failed.error.code == "too_many_pending_steers" and str(MAX_PENDING_STEERS) in failed.error.message


def test_response_already_completed(client: OpenAI) -> None:
    with client.responses.connect() as conn:
        done = finished(conn, model=MODEL, input="Say hello.", store=False)
        failed = failed_steer(conn, done.id, "Louder.")
    assert failed.error.code == "response_already_completed"


def test_response_not_active(client: OpenAI) -> None:
    with client.responses.connect() as conn:
        cut = finished(conn, model=MODEL, input=LONG, store=False, max_output_tokens=16)
        assert cut.status == "incomplete"
        failed = failed_steer(conn, cut.id, "Go on.")
    assert failed.error.code == "response_not_active"


def test_steering_not_supported_on_an_appended_rollout(client: OpenAI) -> None:
    with client.responses.connect(extra_headers={"x-labkit-design": "appended"}) as conn:
        conn.response.create(model=SLOW, input=LONG, store=False, max_output_tokens=300)
        target = read_until(conn, lambda e: e.type == "response.created")[0].response.id
        failed = failed_steer(conn, target, "Stop.")
        read_until(conn, terminal_of(target))
    assert failed.error.code == "steering_not_supported" and "response.append" in failed.error.message


# ---------------------------------------------------------------- response.failed


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Counter[str]]]:
    """The app served in this process, its output classifier failing for requests whose metadata
    asks for it (after response.created), and its connection cache's one question counted."""
    asked: Counter[str] = Counter()
    serve = ConnectionCache.serve

    def counted_serve(self: ConnectionCache, previous_response_id: object) -> Any:
        asked["serve"] += 1
        return serve(self, previous_response_id)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ConnectionCache, "serve", counted_serve)
        app = create_app(
            ServerConfig(db=str(tmp_path_factory.mktemp("failing") / "labkit.db"), profile="local")
        )
        with served_in_thread(app) as url:
            pipeline = app.state.pipeline  # built as the server started
            output_safety = pipeline.stages[Stage.OUTPUT_SAFETY]

            async def failing_output_safety(run: Any) -> None:
                if run.req.metadata and run.req.metadata.get("fail") == "output_safety":
                    raise RuntimeError("the classifier service is down")
                await output_safety(run)

            pipeline.stages[Stage.OUTPUT_SAFETY] = failing_output_safety
            yield f"{url}v1", asked


BREAK = {"fail": "output_safety"}


def test_a_failure_after_created_is_response_failed_over_websocket(failing: tuple[str, Counter[str]]) -> None:
    base_url, _ = failing
    with OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0) as sdk, sdk.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Hi.", store=False, metadata=BREAK, stream_id="x")
        events = read_until(conn, lambda e: e.type in TERMINAL or e.type == "error")
        head = finished(conn, model=MODEL, input="Hi again.", store=False, stream_id="x")
    assert events[0].type == "response.created"
    last = events[-1]
    assert isinstance(last, ResponseWsFailed) and isinstance(last, ResponseFailedEvent)
    assert last.stream_id == "x" and last.sequence_number == len(events) - 1
    assert last.response.status == "failed" and last.response.error.code == "server_error"
    assert last.response.id == events[0].response.id
    assert head.status == "completed", "the lane serves on"


def test_a_failure_after_created_is_response_failed_over_sse(failing: tuple[str, Counter[str]]) -> None:
    base_url, _ = failing
    with OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0) as sdk:
        events = list(sdk.responses.create(model=MODEL, input="Hi.", metadata=BREAK, stream=True))
    assert events[0].type == "response.created"
    assert isinstance(events[-1], ResponseFailedEvent)
    assert events[-1].response.status == "failed" and events[-1].response.error.message
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_failure_before_created_stays_an_error(failing: tuple[str, Counter[str]]) -> None:
    base_url, _ = failing
    with OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0) as sdk, sdk.responses.connect() as conn:
        conn.response.create(model="labkit-no-such-model", input="Hi.", store=False)
        [event] = read_until(conn, lambda e: e.type in TERMINAL or e.type == "error")
    assert event.type == "error" and event.error.code == "model_not_found"


def test_the_connection_cache_is_asked_once_per_create(failing: tuple[str, Counter[str]]) -> None:
    """The follow-up question has one answer, given when a create starts; no stage asks again."""
    base_url, asked = failing
    with OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0) as sdk, sdk.responses.connect() as conn:
        before = asked["serve"]
        a = finished(conn, model=MODEL, input="One.", store=False)
        b = finished(conn, model=MODEL, input="Two.", previous_response_id=a.id, store=False)
        finished(conn, model=MODEL, input="Fork.", previous_response_id=b.id, store=False, stream_id="fork")
        finished(conn, model=MODEL, input="Tools.", tools=[READ_FILE_TOOL], store=False)
        assert asked["serve"] - before == 4
    trace = {s["stage"]: s for s in server_spans(base_url, b.id)}
    assert trace["hydration"]["detail"]["source"] == "connection_cache"
    assert trace["routing"]["detail"]["reused"] is True


# ---------------------------------------------------------------- context_management and conversation


def test_context_management_compacts_first_then_answers(client: OpenAI, server: LabkitServer) -> None:
    window = [{"role": "user", "content": "The build broke in the date parser. " * 40}]
    with client.responses.connect() as conn:
        conn.response.create(
            model=MODEL,
            input=window,
            store=False,
            context_management=[{"type": "compaction", "compact_threshold": 200}],
        )
        events = read_until(conn, lambda e: e.type in TERMINAL)
        response = events[-1].response
        follow_up = finished(conn, model=MODEL, input="Go on.", previous_response_id=response.id, store=False)
    compacting = [e for e in events if e.type == "response.compaction.compacting"]
    assert compacting and all(isinstance(e, ResponseCompactionWsCompacting) for e in compacting)
    item = response.output[0]
    assert isinstance(item, ResponseCompactionItem) and item.encrypted_content.startswith("lkc1.")
    assert {e.item_id for e in compacting} == {item.id} and {e.output_index for e in compacting} == {0}
    assert [o.type for o in response.output] == ["compaction", "message"] and response.status == "completed"
    # The follow-up continues the compacted window: the user message, the compaction, the answer.
    hydration = {s["stage"]: s for s in server_spans(server.base_url, follow_up.id)}["hydration"]
    assert hydration["items"] == 3
    assert follow_up.usage.input_tokens < response.usage.input_tokens


def test_a_window_under_the_threshold_is_not_compacted(client: OpenAI) -> None:
    manage = [{"type": "compaction", "compact_threshold": 100_000}]
    response = client.responses.create(model=MODEL, input="Hi.", context_management=manage)
    assert [o.type for o in response.output] == ["message"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        pytest.param({"conversation": "conv_123"}, "conversation", id="conversation"),
        pytest.param({"context_management": [{"type": "truncation"}]}, "context_management[0].type", id="cm"),
        pytest.param(
            {"context_management": [{"type": "compaction", "compact_threshold": 0}]},
            "context_management[0].compact_threshold",
            id="threshold",
        ),
    ],
)
def test_what_labkit_does_not_implement_is_refused(
    client: OpenAI, fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="Hi.", **fields)
    assert refused.value.status_code == 400
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == param and param.split("[")[0] in error["message"]


def test_a_per_key_cap_refusal_carries_rate_limit_headers_over_http() -> None:
    with LabkitServer(args=["--max-requests-per-key", "1"]) as srv:
        body = {"model": SLOW, "input": LONG, "max_output_tokens": 64, "stream": True}
        with (
            httpx.Client(timeout=30, headers=auth_headers()) as http,
            http.stream("POST", f"{srv.base_url}/responses", json=body) as running,
        ):
            assert running.status_code == 200
            refused = http.post(f"{srv.base_url}/responses", json={"model": MODEL, "input": "Hi."})
            running.read()
    assert refused.status_code == 429
    assert refused.headers["x-ratelimit-limit-requests"] == "1"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert json.loads(refused.text)["error"]["code"] == "rate_limit_exceeded"


# ---------------------------------------------------------------- the measurement a notebook runs


def test_the_correction_measurement_runs_every_strategy(server: LabkitServer) -> None:
    runs = correction_latency(server.base_url, tps=(1000,), repeat=1, answer_tokens=300, after_tokens=20)
    assert list(runs["strategy"]) == list(STRATEGIES) and (runs["seconds"] > 0).all()
    read = runs.set_index("strategy")["read_after"]
    assert read["wait"] >= 300 - 20 - 10, "waiting reads the rest of the answer"
    assert read["steer"] < read["wait"], "a steer stops the answer early"
    table = summary(runs)
    assert list(table["tps"]) == [1000] and table.loc[0, "wait_over_steer"] > 0
    with pytest.raises(ValueError, match="no model at 7"):
        correction_latency(server.base_url, tps=(7,))
