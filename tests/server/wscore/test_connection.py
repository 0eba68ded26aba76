"""WebSocket mode's rules, checked on the I/O-free ``Connection`` alone: no socket, no event loop.

Each test feeds the connection what a client sent and what its responses did, and reads back
what it answers (``Send``, ``Start``, ``Interrupt``, ``Queued``, ``InputReady``, ``Arrive``). The wire itself
is checked by the real-socket tests (server/test_websocket_wire.py, server/test_websocket.py,
api/test_steering.py).
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from labkit.api.errors import APIError
from labkit.designs import compose
from labkit.engine.catalogue import load_catalogue
from labkit.paths import default_data_dir
from labkit.profiles import load_profile
from labkit.server.stages.pipeline import Pipeline
from labkit.server.stages.responder import prepare, respond
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stores.billing import Ledger
from labkit.server.stores.database import Database
from labkit.server.stores.store import ResponseStore
from labkit.server.wscore.connection import Connection
from labkit.server.wscore.connection_jobs import (
    Action,
    Arrive,
    Failed,
    Finished,
    InputReady,
    Interrupt,
    Job,
    Queued,
    Send,
    Start,
)

WEBSOCKET = compose("websocket")
APPENDED = compose("appended")


def frame(kind: str = "response.create", **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


def create(conn: Connection, **fields: Any) -> list[Action]:
    return conn.receive(frame(**{"model": "labkit-spark", "input": "hi", **fields}))


def started(actions: list[Action]) -> list[Job]:
    return [a.job for a in actions if isinstance(a, Start)]


def sent(actions: list[Action]) -> list[dict[str, Any]]:
    return [a.event for a in actions if isinstance(a, Send)]


def conversation(response_id: str) -> Any:
    """What a finished response leaves in the cache: only its Response's id matters here."""
    return SimpleNamespace(response={"id": response_id})


def run(
    conn: Connection, job: Job, response_id: str, status: str = "completed", calls: Any = ()
) -> list[Action]:
    """``job`` is created as ``response_id`` and finishes."""
    conn.created(job, response_id)
    return conn.finished(job, Finished(conversation(response_id), status, list(calls)))


def one_start(actions: list[Action]) -> Job:
    [job] = started(actions)
    return job


def error_code(actions: list[Action]) -> tuple[str, str | None]:
    [event] = sent(actions)
    assert event["type"] == "error", event
    return event["error"]["code"], event.get("stream_id")


# ---------------------------------------------------------------- frames


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("not json", "invalid_json"),
        ("[1]", "invalid_value"),
        (json.dumps({"type": 7}), "invalid_value"),
        (frame("response.cancel"), "unknown_event"),
        (frame("response.append", response_id="resp_x", input=[]), "unknown_event"),  # not appended
        (frame(model="m", stream_id="bad id"), "invalid_stream_id"),
    ],
)
def test_a_frame_the_connection_cannot_use_is_answered_with_an_error(raw: str, code: str) -> None:
    assert error_code(Connection(WEBSOCKET).receive(raw)) == (code, None)


# ---------------------------------------------------------------- lanes and admission


def test_a_lane_runs_its_creates_in_order_and_lanes_run_side_by_side() -> None:
    conn = Connection(WEBSOCKET)
    first = one_start(create(conn))
    assert create(conn) == [], "the default lane is busy: the second waits"
    other = one_start(create(conn, stream_id="b"))
    assert other.stream_id == "b" and first.stream_id is None
    second = one_start(run(conn, first, "resp_1"))
    assert second is not first and second.body["input"] == "hi"
    assert run(conn, second, "resp_2") == []


def test_responses_past_the_in_flight_cap_wait_for_a_slot() -> None:
    conn = Connection(WEBSOCKET, max_in_flight=2)
    a, b = one_start(create(conn, stream_id="a")), one_start(create(conn, stream_id="b"))
    assert create(conn, stream_id="c") == []  # an idle lane, but no slot: no error either
    c = one_start(run(conn, a, "resp_a"))
    assert c.stream_id == "c"
    assert conn.running == 2 and b.stream_id == "b"


@pytest.mark.parametrize(
    ("max_queued", "max_bytes", "creates", "refused"),
    [
        pytest.param(1, 10**6, 3, [2], id="one-waits-the-next-is-refused"),
        pytest.param(2, 10**6, 4, [3], id="two-wait"),
        pytest.param(16, 150, 3, [2], id="bytes"),
    ],
)
def test_creates_past_the_queue_are_refused_on_their_lane(
    max_queued: int, max_bytes: int, creates: int, refused: list[int]
) -> None:
    conn = Connection(WEBSOCKET, max_queued=max_queued, max_queued_bytes=max_bytes)
    answers = [create(conn, stream_id="q") for _ in range(creates)]
    codes = [i for i, actions in enumerate(answers) if sent(actions)]
    assert codes == refused
    for i in refused:
        assert error_code(answers[i]) == ("websocket_queue_full", "q")


def test_the_stream_limit_names_the_stream_it_refused() -> None:
    conn = Connection(WEBSOCKET, max_lanes=2)
    create(conn, stream_id="a"), create(conn, stream_id="b")
    assert error_code(create(conn, stream_id="c")) == ("websocket_stream_limit_reached", "c")
    assert started(create(conn)), "the default lane does not count"


# ---------------------------------------------------------------- the connection cache


@pytest.mark.parametrize(
    ("parent_lane", "fork_lane", "outcome", "still_cached"),
    [
        pytest.param("a", "a", "finished", False, id="continuation-replaces-it"),
        pytest.param("a", "b", "finished", True, id="fork-finishes"),
        pytest.param("a", "a", "failed", False, id="continuation-fails-evicts"),
        pytest.param("a", "b", "failed", True, id="fork-fails-keeps"),
        pytest.param("a", "a", "refused", True, id="refused-by-a-cap-keeps"),
        pytest.param(None, "b", "failed", True, id="fork-from-default-lane-fails-keeps"),
    ],
)
def test_what_a_fork_or_a_failure_does_to_the_cache(
    parent_lane: str | None, fork_lane: str, outcome: str, still_cached: bool
) -> None:
    conn = Connection(WEBSOCKET)
    run(conn, one_start(create(conn, stream_id=parent_lane)), "resp_parent")
    job = one_start(create(conn, stream_id=fork_lane, previous_response_id="resp_parent"))
    assert job.parent is not None and job.parent.response["id"] == "resp_parent"
    if outcome == "finished":
        run(conn, job, "resp_child")
    else:
        conn.finished(job, Failed(evict=outcome == "failed"))
    assert (conn.cache.serve("resp_parent") is not None) is still_cached


def test_each_lane_keeps_only_its_latest_response() -> None:
    conn = Connection(WEBSOCKET)
    run(conn, one_start(create(conn)), "resp_1")
    run(conn, one_start(create(conn, previous_response_id="resp_1")), "resp_2")
    run(conn, one_start(create(conn, stream_id="b")), "resp_b")
    assert conn.cache.serve("resp_1") is None
    assert conn.cache.serve("resp_2") is not None and conn.cache.serve("resp_b") is not None
    assert len(conn.cache) == 2


def test_the_cache_answers_when_a_create_starts_not_when_it_arrives() -> None:
    """A follow-up queued behind its parent finds the parent, which finished meanwhile."""
    conn = Connection(WEBSOCKET)
    parent = one_start(create(conn))
    conn.created(parent, "resp_1")
    assert create(conn, previous_response_id="resp_1") == []
    follow_up = one_start(conn.finished(parent, Finished(conversation("resp_1"), "completed")))
    assert follow_up.parent is not None


def test_a_design_without_the_connection_cache_holds_nothing() -> None:
    conn = Connection(compose("sprint"))
    run(conn, one_start(create(conn)), "resp_1")
    assert one_start(create(conn, previous_response_id="resp_1")).parent is None


# ---------------------------------------------------------------- steering


def steered(conn: Connection, target: Any = "resp_1", **fields: Any) -> list[Action]:
    """A steer frame: it arrives (after the uplink, in the asyncio layer), then is answered."""
    payload = {"type": "response.steer", "previous_response_id": target, "input": "Use tabs.", **fields}
    if target is None:
        del payload["previous_response_id"]
    [arrive] = conn.receive(json.dumps(payload))
    assert isinstance(arrive, Arrive)
    return conn.steer(arrive.payload)


def steer(conn: Connection, target: Any = "resp_1", **fields: Any) -> list[dict[str, Any]]:
    """The events a steer is answered with."""
    return sent(steered(conn, target, **fields))


def interrupts(actions: list[Action]) -> list[Interrupt]:
    return [a for a in actions if isinstance(a, Interrupt)]


def running(conn: Connection, response_id: str = "resp_1", **fields: Any) -> Job:
    job = one_start(create(conn, **fields))
    conn.created(job, response_id)
    return job


INVALID_STEERS = [
    pytest.param({"input": []}, id="empty-list"),
    pytest.param({"input": ""}, id="empty-string"),
    pytest.param({"input": 5}, id="not-input"),
    pytest.param({"input": [{"role": "assistant", "content": "x"}]}, id="assistant"),
    pytest.param(
        {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, id="tool-output"
    ),
    pytest.param({"input": [{"role": "user", "content": "x", "id": "msg_1"}]}, id="extra-field"),
    pytest.param({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]}, id="part"),
    pytest.param({"stream_id": "a"}, id="stream-id"),
    pytest.param({"previous_response_id": 7}, id="target-not-a-string"),
]


@pytest.mark.parametrize("fields", INVALID_STEERS)
def test_invalid_steering_input_is_returned_unaccepted(fields: dict[str, Any]) -> None:
    conn = Connection(WEBSOCKET)
    running(conn)
    answer = steered(conn, **fields)
    [event] = sent(answer)
    assert event["type"] == "response.steer.failed"
    assert event["error"]["code"] == "invalid_input" and event["error"]["type"] == "invalid_request_error"
    assert "id" not in event["steer"], "no id was given to it"
    # Input that is not steering input is not returned: the SDK's event type would not take it.
    assert event["steer"]["input"] == ("" if "input" in fields else "Use tabs.")
    assert interrupts(answer) == [], "nothing to stop for"


def test_a_steer_is_accepted_onto_its_running_target_on_its_lane() -> None:
    conn = Connection(WEBSOCKET)
    job = running(conn, stream_id="a")
    answer = steered(conn)
    [event] = sent(answer)
    assert event["type"] == "response.steer.accepted" and event["stream_id"] == "a"
    assert event["steer"]["previous_response_id"] == "resp_1" and event["steer"]["id"].startswith("steer_")
    # The I/O layer learns to stop the target from the answer, not by reading the job.
    assert interrupts(answer) == [Interrupt(job, event["steer"]["id"])]
    assert answer.index(interrupts(answer)[0]) > 0, "accepted is said first"


def test_each_steer_accepted_for_a_running_response_interrupts_it_and_no_other() -> None:
    conn = Connection(WEBSOCKET)
    job, other = running(conn, stream_id="a"), running(conn, "resp_2", stream_id="b")
    answers = [steered(conn), steered(conn)]
    assert [i.job for answer in answers for i in interrupts(answer)] == [job, job]
    assert other not in [i.job for answer in answers for i in interrupts(answer)]


def test_a_steer_for_a_response_that_waits_for_its_calls_interrupts_nothing() -> None:
    conn = Connection(WEBSOCKET)
    run(conn, one_start(create(conn)), "resp_1", "completed", CALLS)
    answer = steered(conn)
    assert [e["type"] for e in sent(answer)] == ["response.steer.accepted", "response.steer.pending"]
    assert interrupts(answer) == [], "it is not running: its input waits for the continuation"
    # The I/O layer learns from the answer that this steer waits for the create that commits it.
    accepted = sent(answer)[0]["steer"]["id"]
    assert answer[-1] == Queued(accepted)
    continuation = one_start(create(conn, previous_response_id="resp_1"))
    assert [steer.id for steer in continuation.committing] == [accepted]


def test_a_steer_for_a_running_response_is_not_queued() -> None:
    conn = Connection(WEBSOCKET)
    running(conn)
    assert not [a for a in steered(conn) if isinstance(a, Queued)]


@pytest.mark.parametrize("design", ["appended", "sprint"])
def test_a_refused_steer_interrupts_nothing(design: str) -> None:
    conn = Connection(compose(design))
    running(conn)
    answer = steered(conn)
    assert sent(answer)[0]["error"]["code"] == "steering_not_supported" and interrupts(answer) == []


@pytest.mark.parametrize(
    ("status", "calls", "code"),
    [
        pytest.param("completed", [], "response_already_completed", id="completed"),
        pytest.param("incomplete", [], "response_not_active", id="incomplete"),
        pytest.param("failed", [], "response_not_active", id="failed"),
    ],
)
def test_a_steer_that_comes_too_late(status: str, calls: list[Any], code: str) -> None:
    conn = Connection(WEBSOCKET)
    job = running(conn, stream_id="a")
    if status == "failed":
        conn.finished(job, Failed())
    else:
        conn.finished(job, Finished(conversation("resp_1"), status, calls))
    [event] = steer(conn)
    assert (event["type"], event["error"]["code"], event["stream_id"]) == ("response.steer.failed", code, "a")
    assert event["steer"]["input"] == "Use tabs."


def test_a_steer_for_no_response_of_this_connection() -> None:
    [event] = steer(Connection(WEBSOCKET), "resp_elsewhere")
    assert event["error"]["code"] == "response_not_found" and "stream_id" not in event


@pytest.mark.parametrize(
    ("design", "body"),
    [
        pytest.param("appended", {}, id="appended"),
        pytest.param("sprint", {}, id="no-connection-cache"),
        pytest.param("websocket", {"context_management": [{"type": "compaction"}]}, id="compaction"),
    ],
)
def test_steering_not_supported(design: str, body: dict[str, Any]) -> None:
    conn = Connection(compose(design))
    running(conn, **body)
    [event] = steer(conn)
    assert event["error"]["code"] == "steering_not_supported" and event["error"]["message"]


def test_too_many_pending_steers() -> None:
    conn = Connection(WEBSOCKET, max_pending_steers=3)
    running(conn)
    answers = [steer(conn)[0] for _ in range(4)]
    assert [e["type"] for e in answers] == ["response.steer.accepted"] * 3 + ["response.steer.failed"]
    assert answers[-1]["error"]["code"] == "too_many_pending_steers"


def test_a_steered_response_is_followed_by_its_successor_first_on_its_lane() -> None:
    conn = Connection(WEBSOCKET)
    job = running(conn, stream_id="a", instructions="Be brief.", store=False)
    steer(conn, input="First.")
    steer(conn, input=[{"role": "user", "content": [{"type": "input_text", "text": "Second."}]}])
    assert create(conn, stream_id="a") == [], "a create the client sent meanwhile waits its turn"
    successor = one_start(run(conn, job, "resp_1", "incomplete"))
    assert successor.automatic and successor.stream_id == "a"
    assert successor.body["previous_response_id"] == "resp_1"
    assert successor.body["instructions"] == "Be brief." and successor.body["store"] is False
    assert [item["content"] for item in successor.body["input"]] == [
        "First.",
        [{"type": "input_text", "text": "Second."}],
    ]
    assert successor.parent is not None, "a follow-up served from the connection cache"
    conn.created(successor, "resp_2")
    assert started(conn.finished(successor, Finished(conversation("resp_2"), "completed")))


def test_a_successor_that_cannot_be_created_returns_the_input() -> None:
    conn = Connection(WEBSOCKET)
    job = running(conn)
    steer_id = steer(conn)[0]["steer"]["id"]
    successor = one_start(run(conn, job, "resp_1", "incomplete"))
    [event] = sent(conn.finished(successor, Failed()))
    assert event["error"]["code"] == "successor_creation_failed"
    assert event["steer"]["id"] == steer_id and event["steer"]["input"] == "Use tabs."


def test_a_target_that_fails_returns_the_input() -> None:
    conn = Connection(WEBSOCKET)
    job = running(conn)
    steer(conn)
    [event] = sent(conn.finished(job, Failed()))
    assert event["error"]["code"] == "response_not_active" and event["steer"]["id"]


CALLS = [{"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"}]


def test_steering_waits_for_client_owned_calls_then_goes_first_in_the_continuation() -> None:
    conn = Connection(WEBSOCKET)
    job = running(conn, stream_id="a")
    steer_id = steer(conn)[0]["steer"]["id"]
    [pending] = sent(run(conn, job, "resp_1", "completed", CALLS))
    assert pending["type"] == "response.steer.pending"
    assert pending["reason"] == "waiting_for_required_input" and pending["stream_id"] == "a"
    assert pending["required_input"] == [
        {"type": "function_call_output", "call_id": "call_1", "name": "read_file"}
    ]
    assert pending["steer"] == {"id": steer_id, "previous_response_id": "resp_1"}
    # A later steer for the waiting response is accepted and pending at once.
    assert [e["type"] for e in steer(conn, input="Also this.")] == [
        "response.steer.accepted",
        "response.steer.pending",
    ]
    output = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    continuation = one_start(create(conn, stream_id="a", previous_response_id="resp_1", input=[output]))
    assert [item.get("content") for item in continuation.body["input"]] == ["Use tabs.", "Also this.", None]
    conn.created(continuation, "resp_2")
    assert steer(conn, "resp_1")[0]["error"]["code"] == "response_already_completed"


def test_a_continuation_on_another_lane_does_not_take_the_waiting_input() -> None:
    conn = Connection(WEBSOCKET)
    job = running(conn, stream_id="a")
    steer(conn)
    run(conn, job, "resp_1", "completed", CALLS)
    fork = one_start(create(conn, stream_id="b", previous_response_id="resp_1"))
    assert fork.body["input"] == "hi"


def test_steering_events_are_numbered_in_a_sequence_of_their_own() -> None:
    conn = Connection(WEBSOCKET)
    running(conn)
    numbers = [steer(conn)[0]["sequence_number"] for _ in range(3)]
    numbers.append(steer(conn, "resp_missing")[0]["sequence_number"])
    assert numbers == [0, 1, 2, 3]


# ---------------------------------------------------------------- injecting (the multi-agent beta)

OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "42"}


def inject(conn: Connection, target: Any = "resp_1", items: Any = None, **fields: Any) -> list[Action]:
    return conn.receive(
        frame("response.inject", response_id=target, input=[OUTPUT] if items is None else items, **fields)
    )


def test_an_inject_goes_to_the_rollout_it_names_on_any_lane_as_sent() -> None:
    conn = Connection(APPENDED, inject=True)
    job = running(conn, stream_id="lane-a")
    assert inject(conn) == [InputReady(job)]
    assert conn.take_input(job) == [OUTPUT], "taken as sent"
    assert conn.take_input(job) is None, "and only once"


def test_input_handed_to_a_rollout_is_kept_once_in_the_core_and_taken_in_order() -> None:
    conn = Connection(APPENDED, inject=True)
    job = running(conn)
    first, second = [OUTPUT], [{**OUTPUT, "output": "43"}]
    sizes = [len(frame("response.inject", response_id="resp_1", input=items)) for items in (first, second)]
    assert inject(conn, items=first) + inject(conn, items=second) == [InputReady(job), InputReady(job)]
    assert conn.held.held == sum(sizes), "the bytes it holds, until it is taken"
    assert conn.take_input(job) == first and conn.held.held == sizes[1]
    assert conn.take_input(job) == second and conn.held.held == 0
    assert conn.take_input(job) is None and conn.held.held == 0
    assert sent(conn.finished(job, Finished(conversation("resp_1"), "completed"))) == [], "none returned"


@pytest.mark.parametrize(
    ("frame_fields", "param", "code"),
    [
        pytest.param({"input": "an output"}, "input", "invalid_type", id="input-not-a-list"),
        pytest.param(
            {"input": [{"output": "x"}]}, "input[0].type", "missing_required_parameter", id="no-type"
        ),
        pytest.param({"input": [5]}, "input[0]", "invalid_type", id="not-an-item"),
        pytest.param({"response_id": None}, "response_id", "missing_required_parameter", id="no-target"),
        pytest.param({"response_id": 7}, "response_id", "invalid_type", id="bad-target"),
        pytest.param({"stream_id": "lane-a"}, "stream_id", "unknown_parameter", id="a-lane"),
    ],
)
def test_a_malformed_inject_is_an_error_and_hands_nothing_over(
    frame_fields: dict[str, Any], param: str, code: str
) -> None:
    conn = Connection(APPENDED, inject=True)
    job = running(conn)
    payload = {"type": "response.inject", "response_id": "resp_1", "input": [OUTPUT], **frame_fields}
    payload = {k: v for k, v in payload.items() if v is not None}
    [event] = sent(conn.receive(json.dumps(payload)))
    assert event["type"] == "error" and (event["error"]["param"], event["error"]["code"]) == (param, code)
    assert list(job.inputs) == []


def test_an_inject_for_no_response_of_this_connection_returns_the_input() -> None:
    conn = Connection(APPENDED, inject=True)
    [event] = sent(inject(conn, "resp_elsewhere"))
    assert event == {
        "type": "response.inject.failed",
        "error": {
            "code": "response_not_found",
            "message": "No response 'resp_elsewhere' is running on this connection.",
        },
        "input": [OUTPUT],
        "response_id": "resp_elsewhere",
        "sequence_number": 0,
    }


@pytest.mark.parametrize(("design", "calls"), [("appended", []), ("websocket", [{"call_id": "call_1"}])])
def test_an_inject_for_a_finished_response_returns_the_input_on_its_lane(
    design: str, calls: list[Any]
) -> None:
    conn = Connection(compose(design), inject=True)
    job = one_start(create(conn, stream_id="lane-a"))
    run(conn, job, "resp_1", calls=calls)
    [event] = sent(inject(conn))
    assert event["error"]["code"] == "response_already_completed" and event["input"] == [OUTPUT]
    assert event["stream_id"] == "lane-a"
    # A websocket-mode response ended on its calls: the way on is a create that answers them.
    assert ("previous_response_id" in event["error"]["message"]) == (design == "websocket")


@pytest.mark.parametrize("outcome", [Finished(conversation("resp_1"), "completed"), Failed()])
def test_input_a_response_ends_without_taking_is_returned(outcome: Any) -> None:
    for design in ("appended", "websocket"):
        conn = Connection(compose(design), inject=True)
        job = running(conn)
        handed = inject(conn)
        assert bool(handed) == (design == "appended")  # only an appended rollout takes input
        [event] = sent(conn.finished(job, outcome))
        assert event["type"] == "response.inject.failed" and event["input"] == [OUTPUT]
        assert event["error"]["code"] == "response_already_completed"


def test_injects_sent_ahead_are_kept_up_to_a_point() -> None:
    conn = Connection(APPENDED, inject=True, max_queued=2)
    job = running(conn)
    assert [type(a) for a in inject(conn) + inject(conn)] == [InputReady, InputReady]
    assert error_code(inject(conn)) == ("websocket_queue_full", None)
    assert len(job.inputs) == 2


def test_each_wire_takes_its_own_frame_and_names_the_other() -> None:
    prototype, beta = Connection(APPENDED), Connection(APPENDED, inject=True)
    running(prototype), running(beta)
    [refused] = sent(inject(prototype))
    assert refused["error"]["code"] == "unknown_event" and "OpenAI-Beta" in refused["error"]["message"]
    [refused] = sent(beta.receive(frame("response.append", response_id="resp_1", input=[OUTPUT])))
    assert refused["error"]["code"] == "unknown_event" and "response.inject" in refused["error"]["message"]


def test_inject_failures_are_numbered_with_the_steering_events() -> None:
    conn = Connection(WEBSOCKET, inject=True)
    running(conn)
    numbers = [steer(conn)[0]["sequence_number"], sent(inject(conn, "resp_missing"))[0]["sequence_number"]]
    assert numbers == [0, 1]


# ---------------------------------------------------------------- the one answer, read by every stage


def test_every_stage_reads_the_caches_one_answer_and_none_asks_again() -> None:
    """The stages take ``ResponseRun.parent`` as given. Handed a cached conversation under another id
    than the create names, they serve it from memory (hydration, rendering, routing); handed no
    answer for an id only a cache could hold, they go to the store and find nothing. A stage that
    asked again (compared ids, or looked for a cache) would fail one of the two."""

    async def discard(event: dict[str, Any]) -> None:
        return None

    async def scenario() -> None:
        database = Database(":memory:")
        pipeline = Pipeline(
            load_catalogue(None),
            load_profile("local", default_data_dir()),
            ResponseStore(database),
            Ledger(database),
        )
        body = {"model": "labkit-spark", "input": "Hi.", "store": False}
        first = ResponseRun(design=WEBSOCKET, owner="key_a")
        await prepare(pipeline, first, body)
        cached = await respond(pipeline, first, discard)

        served = ResponseRun(design=WEBSOCKET, owner="key_a", parent=cached)
        await prepare(pipeline, served, {**body, "previous_response_id": "resp_named_otherwise"})
        spans = {span.stage: span for span in served.trace.spans}
        assert spans["hydration"].detail["source"] == "connection_cache"
        assert spans["render"].detail["cache"] == "connection_cache" and spans["render"].items == 1
        assert spans["routing"].detail["reused"] is True

        unanswered = ResponseRun(design=WEBSOCKET, owner="key_a")
        with pytest.raises(APIError, match="not found"):
            await prepare(pipeline, unanswered, {**body, "previous_response_id": cached.response["id"]})

    asyncio.run(scenario())


def test_the_oldest_ended_response_is_forgotten_and_lets_go_of_what_it_held() -> None:
    from labkit.server.wscore.connection import _Ended

    forgotten: list[str] = []
    ended = _Ended(2, forget=forgotten.append)
    for name in ("first", "second", "third"):
        ended[name] = name
    assert list(ended) == ["second", "third"] and forgotten == ["first"]
