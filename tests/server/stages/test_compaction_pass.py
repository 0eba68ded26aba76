"""``POST /v1/responses/compact``: compaction over HTTP, and as the seed of a new WebSocket chain.

A real ``labkit serve`` on loopback, driven by the official SDK (``client.responses.compact``)
or raw ``httpx`` where the error body is the point. Every compact resource is checked against
the specification's schema (``open_responses_schema.py``). Token counts are compared between
responses, never timings.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from tests.clients.open_responses_schema import validate, validate_event
from tests.helpers import API_KEY, READ_FILE_TOOL, auth_headers, server_spans

pytestmark = pytest.mark.slow  # servers of its own

MODEL = "labkit-spark"
OTHER_KEY = "sk-labkit-someone-else"
TOOL_OUTPUT = "def handler(request):\n    return respond(request)\n" * 60  # about 600 tokens
TERMINAL = {"response.completed", "response.incomplete"}


# ---------------------------------------------------------------- helpers


def compact(client: OpenAI, **body: Any) -> dict[str, Any]:
    """The compact resource as the server sent it, checked against CompactResource."""
    raw = client.responses.with_raw_response.compact(model=MODEL, **body)
    data = raw.http_response.json()
    validate("CompactResource", data)
    return data


def post_compact(server: LabkitServer, body: Any, key: str | None = API_KEY) -> httpx.Response:
    headers = auth_headers(key) if key else {}
    return httpx.post(f"{server.base_url}/responses/compact", json=body, headers=headers, timeout=30)


def plain(item: Any) -> dict[str, Any]:
    return item if isinstance(item, dict) else item.model_dump(mode="json", exclude_none=True, warnings=False)


def rollout(client: OpenAI, calls: int = 3, **body: Any) -> list[dict[str, Any]]:
    """A window as a client keeps it: a user request, then calls with long outputs, input-array style."""
    window: list[dict[str, Any]] = [{"role": "user", "content": "Find where requests are handled."}]
    for _ in range(calls):
        reply = client.responses.create(
            model=MODEL, input=window, tools=[READ_FILE_TOOL], tool_choice="required", **body
        )
        window += [plain(item) for item in reply.output]
        window.append(
            {"type": "function_call_output", "call_id": window[-1]["call_id"], "output": TOOL_OUTPUT}
        )
    return window


ASK = {"role": "user", "content": "What did you find?"}


# ---------------------------------------------------------------- the endpoint


def test_a_compacted_window_keeps_the_user_messages_and_adds_one_compaction_item(client: OpenAI) -> None:
    window = rollout(client)
    data = compact(client, input=window)
    assert data["object"] == "response.compaction" and data["id"].startswith("resp_")
    *kept, item = data["output"]
    assert [m["content"][0]["text"] for m in kept] == [window[0]["content"]]
    assert kept[0]["role"] == "user" and kept[0]["status"] == "completed"
    assert set(item) == {"id", "type", "encrypted_content"}
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")


def test_a_response_from_the_compacted_window_reads_far_fewer_tokens(client: OpenAI) -> None:
    window = rollout(client)
    full = client.responses.create(model=MODEL, input=[*window, ASK], store=False)
    data = compact(client, input=window)
    small = client.responses.create(model=MODEL, input=[*data["output"], ASK], store=False)
    assert small.status == "completed" and small.output_text
    assert full.usage is not None and small.usage is not None
    assert small.usage.input_tokens * 5 < full.usage.input_tokens
    # The compaction pass read the window and wrote the (short) summary.
    usage = data["usage"]
    assert usage["input_tokens"] > 5 * usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens"] >= full.usage.input_tokens - 64  # the window, less the question


def test_the_compaction_item_renders_the_same_every_time(client: OpenAI) -> None:
    """Same window, same item; and a response from it finds its prompt in the prefix cache."""
    window = rollout(client, calls=2)
    first, again = compact(client, input=window), compact(client, input=window)
    assert first["output"][-1]["encrypted_content"] == again["output"][-1]["encrypted_content"]
    body = {"model": MODEL, "input": [*first["output"], ASK], "store": False, "prompt_cache_key": "compacted"}
    cold = client.responses.create(**body)
    warm = client.responses.create(**body)
    assert cold.usage is not None and warm.usage is not None
    assert warm.usage.input_tokens == cold.usage.input_tokens
    assert warm.usage.input_tokens_details.cached_tokens > cold.usage.input_tokens_details.cached_tokens


def test_compacting_a_compacted_window_adds_up(client: OpenAI) -> None:
    window = rollout(client, calls=2)
    once = compact(client, input=window)["output"]
    call = client.responses.create(
        model=MODEL, input=[*once, ASK], tools=[READ_FILE_TOOL], tool_choice="required", store=False
    ).output[0]
    longer = [
        *once,
        ASK,
        plain(call),
        {"type": "function_call_output", "call_id": call.call_id, "output": "ok"},
    ]
    twice = compact(client, input=longer)["output"]
    assert [item["type"] for item in twice] == ["message", "message", "compaction"]
    # The newest compaction still stands for the first window's calls.
    answer = {"type": "function_call_output", "call_id": window[1]["call_id"], "output": "late"}
    assert client.responses.create(model=MODEL, input=[*twice, answer], store=False).status == "completed"


def test_the_calls_a_compaction_replaced_still_count_for_the_task(client: OpenAI) -> None:
    """The model calls tools up to three times for a user message: two made before compacting
    leave one, and once that one is compacted too, it answers."""
    once = compact(client, input=rollout(client, calls=2))["output"]
    step = client.responses.create(model=MODEL, input=once, tools=[READ_FILE_TOOL], store=False)
    assert [item.type for item in step.output] == ["function_call"]
    call = plain(step.output[0])
    done = {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}
    twice = compact(client, input=[*once, call, done])["output"]
    answer = client.responses.create(model=MODEL, input=twice, tools=[READ_FILE_TOOL], store=False)
    assert [item.type for item in answer.output] == ["message"]


def test_the_compaction_pass_has_a_trace(server: LabkitServer, client: OpenAI) -> None:
    data = compact(client, input=rollout(client, calls=1))
    stages = [span["stage"] for span in server_spans(server.base_url, data["id"])]
    assert {"validation", "hydration", "render", "routing", "prefill", "decode"} <= set(stages)


# ---------------------------------------------------------------- what it refuses


def test_a_missing_model_is_a_400(server: LabkitServer) -> None:
    reply = post_compact(server, {"input": "Hi"})
    assert reply.status_code == 400
    validate("ErrorBody", reply.json())
    error = reply.json()["error"]
    assert error["message"] == "Missing required parameter: 'model'."
    assert (error["param"], error["code"]) == ("model", "missing_required_parameter")


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "no-such-model", "input": "Hi"}, "model", "model_not_found"),
        ({"model": MODEL}, "input", "missing_required_parameter"),
        ({"model": MODEL, "input": []}, "input", None),
        ({"model": 7, "input": "Hi"}, "model", "invalid_type"),
        ({"model": MODEL, "input": [{"type": "message"}]}, "input[0].role", "missing_required_parameter"),
    ],
)
def test_bad_compact_requests_are_400s(server: LabkitServer, body: Any, param: str, code: str | None) -> None:
    reply = post_compact(server, body)
    assert reply.status_code == 400, reply.text
    validate("ErrorBody", reply.json())
    assert (reply.json()["error"]["param"], reply.json()["error"]["code"]) == (param, code)


def test_other_methods_on_the_path_are_refused(server: LabkitServer) -> None:
    reply = httpx.get(f"{server.base_url}/responses/compact", headers=auth_headers(), timeout=30)
    assert reply.status_code == 404  # read as GET /v1/responses/{id}: no response has that id


def test_the_window_meets_the_input_checks_of_a_create(server: LabkitServer) -> None:
    orphan = {"type": "function_call_output", "call_id": "call_nobody_made", "output": "ok"}
    reply = post_compact(server, {"model": MODEL, "input": [{"role": "user", "content": "Hi"}, orphan]})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "input[1].call_id"


# ---------------------------------------------------------------- previous_response_id, store and keys


def test_previous_response_id_compacts_the_stored_conversation(client: OpenAI) -> None:
    first = client.responses.create(
        model=MODEL, input="Find the handler.", tools=[READ_FILE_TOOL], tool_choice="required"
    )
    call = first.output[0]
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_OUTPUT}
    second = client.responses.create(
        model=MODEL,
        input=[answer],
        previous_response_id=first.id,
        tools=[READ_FILE_TOOL],
        tool_choice="required",
    )
    data = compact(client, previous_response_id=second.id, input="And the tests?")
    texts = [item["content"][0]["text"] for item in data["output"][:-1]]
    assert texts == ["Find the handler.", "And the tests?"]  # the chain's user messages, then input's
    # The client starts over from the compacted window, answering the call left pending.
    pending = {"type": "function_call_output", "call_id": second.output[0].call_id, "output": "ok"}
    after = client.responses.create(model=MODEL, input=[*data["output"], pending])
    assert after.status == "completed"
    chained = client.responses.create(model=MODEL, input="Thanks.", previous_response_id=after.id)
    assert chained.status == "completed"


@pytest.mark.parametrize("how", ["unstored", "other_key", "unknown"])
def test_previous_response_id_sees_only_this_keys_stored_responses(
    server: LabkitServer, client: OpenAI, how: str
) -> None:
    made = client.responses.create(model=MODEL, input="Hi", store=how != "unstored")
    rid = "resp_unknown" if how == "unknown" else made.id
    reply = post_compact(
        server, {"model": MODEL, "previous_response_id": rid}, OTHER_KEY if how == "other_key" else API_KEY
    )
    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "message": f"Previous response with id '{rid}' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


def test_compaction_stores_nothing(client: OpenAI) -> None:
    data = compact(client, input="Hi")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(data["id"])


def test_a_compaction_item_works_only_for_the_key_that_made_it(server: LabkitServer, client: OpenAI) -> None:
    item = compact(client, input=rollout(client, calls=1))["output"][-1]
    body = {"model": MODEL, "input": [item, ASK]}
    for key in (OTHER_KEY, None):
        reply = httpx.post(
            f"{server.base_url}/responses", json=body, headers=auth_headers(key) if key else {}, timeout=30
        )
        assert reply.status_code == 400
        assert reply.json()["error"] == {
            "message": f"The encrypted content for item {item['id']} could not be verified.",
            "type": "invalid_request_error",
            "param": "input[0].encrypted_content",
            "code": "invalid_encrypted_content",
        }


def test_an_altered_compaction_item_is_refused(client: OpenAI) -> None:
    item = compact(client, input=rollout(client, calls=1))["output"][-1]
    prefix, body, seal = item["encrypted_content"].split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["calls"].append("call_invented")
    forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model=MODEL, input=[{**item, "encrypted_content": f"{prefix}.{forged}.{seal}"}]
        )
    assert info.value.body["code"] == "invalid_encrypted_content"  # type: ignore[index]


def test_a_stored_response_keeps_the_compaction_item_as_input(client: OpenAI) -> None:
    data = compact(client, input=rollout(client, calls=1))
    created = client.responses.create(model=MODEL, input=[*data["output"], ASK])
    listed = client.responses.input_items.list(created.id, order="asc")
    assert [item.type for item in listed.data] == ["message", "compaction", "message"]
    assert plain(listed.data[1])["encrypted_content"] == data["output"][-1]["encrypted_content"]


# ---------------------------------------------------------------- the seed of a new WebSocket chain


def ws_answer(conn: Any, **body: Any) -> dict[str, Any]:
    """One create in WebSocket mode; every frame is checked; returns the last (terminal or error)."""
    conn.response.create(model=MODEL, store=False, **body)
    while True:
        frame = json.loads(conn.recv_bytes())
        validate_event(frame, websocket=True)
        if frame["type"] in TERMINAL or frame["type"] == "error":
            return frame


def test_a_compacted_window_seeds_a_new_websocket_chain(client: OpenAI) -> None:
    """The recovery path: a store=false chain is lost with its connection; compact what the client kept."""
    window: list[dict[str, Any]] = [{"role": "user", "content": "Find where requests are handled."}]
    tools = {"tools": [READ_FILE_TOOL], "tool_choice": "required"}
    with client.responses.connect() as old:
        reply = ws_answer(old, input=window, **tools)["response"]
        for _ in range(2):
            window += reply["output"]
            answer = {
                "type": "function_call_output",
                "call_id": reply["output"][0]["call_id"],
                "output": TOOL_OUTPUT,
            }
            window.append(answer)
            reply = ws_answer(old, input=[answer], previous_response_id=reply["id"], **tools)["response"]
        window += reply["output"]  # ends on a call the client has not answered yet
    full_tokens = reply["usage"]["input_tokens"]
    pending = {"type": "function_call_output", "call_id": reply["output"][0]["call_id"], "output": "ok"}
    with client.responses.connect() as new:
        lost = ws_answer(new, input=[pending], previous_response_id=reply["id"])
        assert lost["error"]["code"] == "previous_response_not_found"
        data = compact(client, input=window)
        seeded = ws_answer(new, input=[*data["output"], pending])
        assert seeded["type"] == "response.completed"
        assert seeded["response"]["usage"]["input_tokens"] * 3 < full_tokens
        follow = ws_answer(new, input=[ASK], previous_response_id=seeded["response"]["id"])
        assert follow["type"] == "response.completed"  # the chain goes on from the connection cache
