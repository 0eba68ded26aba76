"""The HTTP surface (JSON, SSE, retrieve/delete/input items, errors, keys) through the official SDK.

Every test talks to a real ``labkit serve`` subprocess with the unmodified
``openai`` SDK, or with raw ``httpx`` where the wire bytes themselves are the
point (SSE framing, error bodies). Nothing here measures wall-clock time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from conftest import (
    API_KEY,
    CALL_TURN_EVENTS,
    FIVE_ITEMS,
    READ_FILE_TOOL,
    TEXT_TURN_EVENTS,
    auth_headers,
    collapse_deltas,
)
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from labkit.text.tokenizer import encode_text

MODEL = "labkit-spark"
BLOCK = 16  # the prefix cache's block size: cached_tokens is always a multiple of it
ERROR_KEYS = {"message", "type", "param", "code"}

LIST_DIR_TOOL = {
    "type": "function",
    "name": "list_dir",
    "description": "List a directory.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "strict": True,
}

# A schema with more than strings in it, to check generated arguments really validate.
SEARCH_TOOL = {
    "type": "function",
    "name": "search",
    "description": "Search the code base.",
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 12},
            "limit": {"type": "integer", "minimum": 5},
            "mode": {"type": "string", "enum": ["regex", "literal"]},
            "paths": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "case_sensitive": {"type": "boolean"},
            "scope": {
                "type": "object",
                "properties": {"depth": {"type": "number", "exclusiveMinimum": 0}},
                "required": ["depth"],
                "additionalProperties": False,
            },
        },
        "required": ["query", "limit", "mode", "paths", "case_sensitive", "scope"],
        "additionalProperties": False,
    },
    "strict": True,
}

# ---------------------------------------------------------------- helpers


def raw_post(server: LabkitServer, body: Any, *, key: str | None = API_KEY) -> httpx.Response:
    """POST /v1/responses with an arbitrary body: a dict as JSON, bytes as they are."""
    headers = {"content-type": "application/json", **(auth_headers(key) if key else {})}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.base_url}/responses", content=content, headers=headers, timeout=30)


def error_of(resp: httpx.Response, status: int) -> dict[str, Any]:
    """The ``error`` object of an error response, after checking the envelope's exact shape."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == ERROR_KEYS
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def sse_frames(server: LabkitServer, body: dict[str, Any]) -> tuple[httpx.Response, str]:
    with httpx.stream(
        "POST",
        f"{server.base_url}/responses",
        json={**body, "stream": True},
        headers=auth_headers(),
        timeout=30,
    ) as resp:
        text = "".join(resp.iter_text())
    return resp, text


def check_sequence(events: list[Any]) -> None:
    assert [e.sequence_number for e in events] == list(range(len(events)))


def check_usage(usage: Any) -> None:
    assert usage is not None
    assert usage.input_tokens > 0
    assert usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    cached = usage.input_tokens_details.cached_tokens
    assert 0 <= cached <= usage.input_tokens
    assert cached % BLOCK == 0
    assert usage.output_tokens_details.reasoning_tokens == 0


@pytest.fixture
def other_client(server: LabkitServer) -> Iterator[OpenAI]:
    """A client with a different API key: a different owner of stored responses."""
    with OpenAI(base_url=server.base_url, api_key="sk-someone-else", max_retries=0) as c:
        yield c


# ---------------------------------------------------------------- 1. plain create


def test_create_plain(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="Say hello.", metadata={"case": "plain"})
    assert r.id.startswith("resp_")
    assert r.object == "response"
    assert r.status == "completed"
    assert r.model == MODEL
    assert r.error is None and r.incomplete_details is None
    assert r.completed_at is not None and r.completed_at >= r.created_at
    assert r.store is True
    assert r.metadata == {"case": "plain"}
    assert r.previous_response_id is None
    assert r.output_text
    assert len(r.output) == 1
    msg = r.output[0]
    assert msg.type == "message" and msg.role == "assistant" and msg.status == "completed"
    assert msg.id.startswith("msg_")
    assert [p.type for p in msg.content] == ["output_text"]
    assert msg.content[0].annotations == []
    check_usage(r.usage)
    # output_tokens counts exactly the tokens of the text that was sampled
    assert r.usage.output_tokens == len(encode_text(r.output_text))


def test_create_echoes_settings(client: OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        input="hi",
        instructions="Be brief.",
        temperature=0.3,
        top_p=0.9,
        max_output_tokens=64,
        parallel_tool_calls=False,
        truncation="auto",
        tools=[READ_FILE_TOOL],
        tool_choice="none",
    )
    assert r.instructions == "Be brief."
    assert r.temperature == pytest.approx(0.3)
    assert r.top_p == pytest.approx(0.9)
    assert r.max_output_tokens == 64
    assert r.parallel_tool_calls is False
    assert r.truncation == "auto"
    assert r.tool_choice == "none"
    assert [t.name for t in r.tools] == ["read_file"]


# ---------------------------------------------------------------- 2. create(stream=True)


def test_stream_text_events(client: OpenAI) -> None:
    events = list(client.responses.create(model=MODEL, input="Say hello.", stream=True))
    types = [e.type for e in events]
    assert collapse_deltas(types) == TEXT_TURN_EVENTS
    check_sequence(events)

    created, in_progress = events[0], events[1]
    assert created.response.status == "in_progress" and created.response.output == []
    assert in_progress.response.status == "in_progress"
    rid = created.response.id
    assert rid.startswith("resp_") and in_progress.response.id == rid

    added = events[2]
    assert added.output_index == 0
    assert added.item.type == "message" and added.item.content == []
    assert added.item.status == "in_progress"
    item_id = added.item.id
    assert item_id.startswith("msg_")

    part_added = events[3]
    assert (part_added.item_id, part_added.output_index, part_added.content_index) == (item_id, 0, 0)
    assert part_added.part.type == "output_text" and part_added.part.text == ""

    deltas = [e for e in events if e.type == "response.output_text.delta"]
    for d in deltas:
        assert (d.item_id, d.output_index, d.content_index) == (item_id, 0, 0)
        assert d.logprobs == []
    text = "".join(d.delta for d in deltas)

    text_done, part_done, item_done, completed = events[-4:]
    assert (text_done.item_id, text_done.output_index, text_done.content_index) == (item_id, 0, 0)
    assert text_done.text == text
    assert (part_done.item_id, part_done.output_index, part_done.content_index) == (item_id, 0, 0)
    assert part_done.part.text == text
    assert item_done.output_index == 0 and item_done.item.id == item_id
    assert item_done.item.status == "completed"
    assert item_done.item.content[0].text == text

    final = completed.response
    assert final.id == rid and final.status == "completed"
    assert final.output_text == text
    assert [o.id for o in final.output] == [item_id]
    check_usage(final.usage)
    assert final.usage.output_tokens == len(encode_text(text))
    assert 1 <= len(deltas) <= final.usage.output_tokens

    # a stored streamed response reads back as the terminal event carried it
    assert client.responses.retrieve(rid).model_dump() == final.model_dump()


def test_stream_function_call_events(client: OpenAI) -> None:
    events = list(
        client.responses.create(
            model=MODEL, input="Read the README.", tools=[READ_FILE_TOOL], tool_choice="required", stream=True
        )
    )
    types = [e.type for e in events]
    assert collapse_deltas(types) == CALL_TURN_EVENTS
    check_sequence(events)

    added = events[2]
    assert added.output_index == 0
    assert added.item.type == "function_call"
    assert added.item.arguments == "" and added.item.status == "in_progress"
    assert added.item.name == "read_file"
    assert added.item.id.startswith("fc_") and added.item.call_id.startswith("call_")

    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert all(d.item_id == added.item.id and d.output_index == 0 for d in deltas)
    arguments = "".join(d.delta for d in deltas)

    done, item_done, completed = events[-3:]
    assert done.item_id == added.item.id and done.output_index == 0
    assert done.name == "read_file" and done.arguments == arguments
    assert item_done.item.arguments == arguments and item_done.item.status == "completed"
    assert item_done.item.call_id == added.item.call_id

    final = completed.response
    assert final.status == "completed"
    assert [(o.type, o.id, o.arguments) for o in final.output] == [
        ("function_call", added.item.id, arguments)
    ]
    jsonschema.validate(json.loads(arguments), READ_FILE_TOOL["parameters"])
    check_usage(final.usage)


def test_stream_incomplete_terminal_event(client: OpenAI) -> None:
    events = list(
        client.responses.create(model=MODEL, input="Write 300 tokens.", max_output_tokens=40, stream=True)
    )
    check_sequence(events)
    assert events[-1].type == "response.incomplete"
    assert "response.completed" not in {e.type for e in events}
    final = events[-1].response
    assert final.status == "incomplete"
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 40
    assert final.output[0].status == "incomplete"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas


def test_stream_error_before_first_event_is_plain_http_error(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="hi", previous_response_id="resp_x", stream=True)
    assert info.value.code == "previous_response_not_found"


# ---------------------------------------------------------------- multi-item output (scripted)


@pytest.fixture(scope="module")
def scripted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabkitServer]:
    """A server whose data dir holds one scenario: a message then a call in the same response."""
    data = tmp_path_factory.mktemp("data")
    (data / "scenarios").mkdir()
    steps = [
        {"say": "Let me look at the file.", "call": {"name": "read_file", "arguments": {"path": "a.py"}}},
        {"say": "All done."},
    ]
    (data / "scenarios" / "two_items.json").write_text(json.dumps({"steps": steps}))
    with LabkitServer(env={"LABKIT_DATA": str(data)}) as srv:
        yield srv


def test_stream_two_output_items_indices(scripted_server: LabkitServer) -> None:
    with OpenAI(base_url=scripted_server.base_url, api_key=API_KEY, max_retries=0) as c:
        events = list(
            c.responses.create(
                model=MODEL,
                input="go",
                tools=[READ_FILE_TOOL],
                metadata={"labkit_scenario": "two_items"},
                stream=True,
            )
        )
    check_sequence(events)
    types = collapse_deltas([e.type for e in events])
    assert types == TEXT_TURN_EVENTS[:-1] + CALL_TURN_EVENTS[2:]
    by_type: dict[str, list[Any]] = {}
    for e in events:
        by_type.setdefault(e.type, []).append(e)
    assert [e.output_index for e in by_type["response.output_item.added"]] == [0, 1]
    assert [e.output_index for e in by_type["response.output_item.done"]] == [0, 1]
    assert {e.output_index for e in by_type["response.output_text.delta"]} == {0}
    assert {e.output_index for e in by_type["response.function_call_arguments.delta"]} == {1}
    final = events[-1].response
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert final.output_text == "Let me look at the file."
    assert json.loads(final.output[1].arguments) == {"path": "a.py"}
    assert final.usage.output_tokens == len(encode_text("Let me look at the file.")) + len(
        encode_text(final.output[1].arguments)
    )


# ---------------------------------------------------------------- 3. responses.stream helper


def test_stream_helper_final_response(client: OpenAI) -> None:
    deltas: list[str] = []
    types: list[str] = []
    with client.responses.stream(model=MODEL, input="Say hello.") as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert final.id.startswith("resp_") and final.status == "completed"
    assert final.output_text == "".join(deltas) != ""
    check_usage(final.usage)


def test_stream_helper_with_tool(client: OpenAI) -> None:
    with client.responses.stream(
        model=MODEL, input="Read it.", tools=[READ_FILE_TOOL], tool_choice="required"
    ) as stream:
        final = stream.get_final_response()
    (call,) = final.output
    assert call.type == "function_call" and call.name == "read_file"
    jsonschema.validate(json.loads(call.arguments), READ_FILE_TOOL["parameters"])


# ---------------------------------------------------------------- 4. function tools + chaining


def test_function_tool_round_trip_chained(client: OpenAI) -> None:
    # A prompt_cache_key routes both requests to the same replica, as agent clients do.
    first = client.responses.create(
        model=MODEL, input="What is in README.md?", tools=[READ_FILE_TOOL], prompt_cache_key="readme-chat"
    )
    assert first.status == "completed"
    (call,) = first.output
    assert call.type == "function_call" and call.name == "read_file"
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), READ_FILE_TOOL["parameters"])

    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[READ_FILE_TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "# labkit\n" * 20}],
        prompt_cache_key="readme-chat",
    )
    assert second.previous_response_id == first.id
    assert second.status == "completed"
    u1, u2 = first.usage, second.usage
    check_usage(u2)
    # the whole history was served: first prompt + the call it produced + the new output
    assert u2.input_tokens > u1.input_tokens + u1.output_tokens
    # ... and the prefix cache held it: at least every full block of the first prompt
    cached = u2.input_tokens_details.cached_tokens
    assert cached > 0 and cached % BLOCK == 0
    assert cached >= (u1.input_tokens // BLOCK) * BLOCK


def test_chained_equals_full_history_replay(client: OpenAI) -> None:
    """previous_response_id is shorthand for replaying every earlier item: same prompt tokens."""
    first = client.responses.create(model=MODEL, input="Open the config.", tools=[READ_FILE_TOOL])
    call = first.output[0]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "debug = true"}
    chained = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[READ_FILE_TOOL], input=[output]
    )
    replayed = client.responses.create(
        model=MODEL,
        tools=[READ_FILE_TOOL],
        store=False,
        input=[
            {"role": "user", "content": "Open the config."},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            output,
        ],
    )
    assert replayed.usage.input_tokens == chained.usage.input_tokens
    assert [o.type for o in replayed.output] == [o.type for o in chained.output]


def test_tool_arguments_valid_under_richer_schema(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="Find it.", tools=[SEARCH_TOOL], tool_choice="required")
    (call,) = r.output
    assert call.name == "search"
    jsonschema.Draft202012Validator(SEARCH_TOOL["parameters"]).validate(json.loads(call.arguments))


def test_agent_loop_reaches_text_answer(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Explore the repo.", tools=[READ_FILE_TOOL])
    calls = 0
    for _ in range(10):
        if response.output[-1].type != "function_call":
            break
        call = response.output[-1]
        jsonschema.validate(json.loads(call.arguments), READ_FILE_TOOL["parameters"])
        calls += 1
        response = client.responses.create(
            model=MODEL,
            previous_response_id=response.id,
            tools=[READ_FILE_TOOL],
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": f"file {calls}"}],
        )
    assert response.output[-1].type == "message"
    assert response.output_text
    assert calls == 3  # the generic policy's bound per user turn

    # a new user message opens a new turn: tools get called again
    again = client.responses.create(
        model=MODEL, previous_response_id=response.id, tools=[READ_FILE_TOOL], input="And the tests?"
    )
    assert again.output[0].type == "function_call"


def test_instructions_not_carried_over(client: OpenAI) -> None:
    long_instructions = "Follow the house style. " * 100
    first = client.responses.create(model=MODEL, input="hi", instructions=long_instructions)
    second = client.responses.create(model=MODEL, input="again", previous_response_id=first.id)
    assert first.instructions == long_instructions
    assert second.instructions is None
    # the history (first input and output) is there, the old instructions are not
    assert second.usage.input_tokens < first.usage.input_tokens
    third = client.responses.create(
        model=MODEL, input="again", previous_response_id=first.id, instructions=long_instructions
    )
    assert third.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


# ---------------------------------------------------------------- 5. tool_choice and output length


def test_tool_choice_none_gives_text(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="hi", tools=[READ_FILE_TOOL], tool_choice="none")
    assert [o.type for o in r.output] == ["message"]
    assert r.output_text


def test_tool_choice_required_gives_call(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="hi", tools=[READ_FILE_TOOL], tool_choice="required")
    assert [o.type for o in r.output] == ["function_call"]
    assert r.tool_choice == "required"


def test_tool_choice_named_function(client: OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        input="hi",
        tools=[READ_FILE_TOOL, LIST_DIR_TOOL],
        tool_choice={"type": "function", "name": "list_dir"},
    )
    (call,) = r.output
    assert call.type == "function_call" and call.name == "list_dir"
    jsonschema.validate(json.loads(call.arguments), LIST_DIR_TOOL["parameters"])
    assert r.tool_choice.type == "function" and r.tool_choice.name == "list_dir"


def test_no_tools_gives_text(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="hi", tool_choice="auto")
    assert [o.type for o in r.output] == ["message"]


def test_max_output_tokens_truncates_long_answer(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="Write a long essay", max_output_tokens=16)
    assert r.usage.output_tokens == 16
    assert r.status == "incomplete"
    assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete"


def test_max_output_tokens_truncates(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="Write 300 tokens.", max_output_tokens=16)
    assert r.status == "incomplete"
    assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 16
    assert r.output[0].status == "incomplete"
    assert len(encode_text(r.output_text)) == 16


def test_max_output_tokens_truncates_a_tool_call(client: OpenAI) -> None:
    long_schema = {
        "type": "object",
        "properties": {"content": {"type": "string", "minLength": 400}},
        "required": ["content"],
    }
    tool = {"type": "function", "name": "write_file", "parameters": long_schema}
    r = client.responses.create(
        model=MODEL, input="hi", tools=[tool], tool_choice="required", max_output_tokens=16
    )
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 16
    assert r.output[0].type == "function_call" and r.output[0].status == "incomplete"


def test_asked_token_count_is_exact(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="Answer in 300 tokens.")
    assert r.status == "completed"
    assert r.usage.output_tokens == 300
    assert len(encode_text(r.output_text)) == 300


@pytest.mark.parametrize(
    ("count", "model"),
    [(1, MODEL), (17, MODEL), (113, MODEL), (250, MODEL), (1234, "labkit-burst")],  # "1,234 tokens"
)
def test_asked_token_counts(client: OpenAI, count: int, model: str) -> None:
    r = client.responses.create(model=model, input=f"Please write {count:,} tokens.", store=False)
    assert r.status == "completed"
    assert r.usage.output_tokens == count


# ---------------------------------------------------------------- 6. retrieve, delete, input items


def test_retrieve_matches_create(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="hi", metadata={"k": "v"})
    got = client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump()


def test_delete_then_404(client: OpenAI, server: LabkitServer) -> None:
    r = client.responses.create(model=MODEL, input="hi")
    assert client.responses.retrieve(r.id).id == r.id
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.retrieve(r.id)
    assert info.value.status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.BadRequestError) as chained:
        client.responses.create(model=MODEL, input="more", previous_response_id=r.id)
    assert chained.value.code == "previous_response_not_found"


def test_delete_body(client: OpenAI, server: LabkitServer) -> None:
    r = client.responses.create(model=MODEL, input="hi")
    resp = httpx.delete(f"{server.base_url}/responses/{r.id}", headers=auth_headers())
    assert resp.status_code == 200
    assert resp.json() == {"id": r.id, "object": "response", "deleted": True}
    err = error_of(httpx.get(f"{server.base_url}/responses/{r.id}", headers=auth_headers()), 404)
    assert r.id in err["message"]


def test_retrieve_unknown_404(client: OpenAI, server: LabkitServer) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_does_not_exist")
    error_of(httpx.get(f"{server.base_url}/responses/resp_nope", headers=auth_headers()), 404)


def test_input_items_order_and_pagination(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input=FIVE_ITEMS)
    asc = client.responses.input_items.list(r.id, order="asc")
    assert [i.role for i in asc.data] == [i["role"] for i in FIVE_ITEMS]
    assert asc.has_more is False
    ids = [i.id for i in asc.data]
    assert len(set(ids)) == 5 and all(ids)
    assert asc.first_id == ids[0] and asc.last_id == ids[-1]

    desc = client.responses.input_items.list(r.id)  # default order: newest first
    assert [i.id for i in desc.data] == ids[::-1]
    assert desc.first_id == ids[-1] and desc.last_id == ids[0]
    assert [i.id for i in client.responses.input_items.list(r.id, order="desc").data] == ids[::-1]

    page1 = client.responses.input_items.list(r.id, order="asc", limit=2)
    assert [i.id for i in page1.data] == ids[:2]
    assert page1.has_more is True
    assert (page1.first_id, page1.last_id) == (ids[0], ids[1])
    page2 = client.responses.input_items.list(r.id, order="asc", limit=2, after=page1.last_id)
    assert [i.id for i in page2.data] == ids[2:4] and page2.has_more is True
    page3 = client.responses.input_items.list(r.id, order="asc", limit=2, after=page2.last_id)
    assert [i.id for i in page3.data] == ids[4:] and page3.has_more is False
    assert page3.first_id == page3.last_id == ids[4]

    back = client.responses.input_items.list(r.id, order="desc", limit=3, after=ids[3])
    assert [i.id for i in back.data] == ids[2::-1] and back.has_more is False

    # the SDK's own auto-pagination follows `after` to the end
    assert [i.id for i in client.responses.input_items.list(r.id, order="asc", limit=2)] == ids
    assert [i.id for i in client.responses.input_items.list(r.id, limit=1)] == ids[::-1]


def test_input_items_of_chained_response_are_its_own(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=FIVE_ITEMS)
    second = client.responses.create(model=MODEL, input="five", previous_response_id=first.id)
    items = client.responses.input_items.list(second.id).data
    assert len(items) == 1 and items[0].role == "user"


def test_input_items_bad_params(client: OpenAI, server: LabkitServer) -> None:
    r = client.responses.create(model=MODEL, input="hi")
    url = f"{server.base_url}/responses/{r.id}/input_items"
    assert (
        error_of(httpx.get(url, params={"order": "sideways"}, headers=auth_headers()), 400)["param"]
        == "order"
    )
    assert error_of(httpx.get(url, params={"limit": 0}, headers=auth_headers()), 400)["param"] == "limit"
    assert error_of(httpx.get(url, params={"limit": "x"}, headers=auth_headers()), 400)["param"] == "limit"
    assert (
        error_of(httpx.get(url, params={"after": "msg_nope"}, headers=auth_headers()), 400)["param"]
        == "after"
    )
    body = httpx.get(url, headers=auth_headers()).json()
    assert set(body) == {"object", "data", "first_id", "last_id", "has_more"}
    assert body["object"] == "list"


# ---------------------------------------------------------------- 7. store=false


def test_store_false_not_retrievable_nor_chainable(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="hi", store=False)
    assert r.status == "completed" and r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(r.id)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="more", previous_response_id=r.id)
    err = info.value
    assert err.status_code == 400
    assert err.code == "previous_response_not_found"
    assert err.param == "previous_response_id"
    assert err.type == "invalid_request_error"
    assert err.body["message"] == f"Previous response with id '{r.id}' not found."


def test_unknown_previous_response_exact_error(server: LabkitServer) -> None:
    err = error_of(raw_post(server, {"model": MODEL, "input": "hi", "previous_response_id": "resp_x"}), 400)
    assert err == {
        "message": "Previous response with id 'resp_x' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


# ---------------------------------------------------------------- 8. error bodies


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": MODEL, "input": "hi", "temperature": "hot"}, "temperature", "invalid_type"),
        ({"input": "hi"}, "model", "missing_required_parameter"),
        ({"model": MODEL, "input": [{"role": "robot", "content": "x"}]}, "input[0].role", None),
        (
            {"model": MODEL, "input": [{"role": "user", "content": "ok"}, {"role": "user"}]},
            "input[1].content",
            "missing_required_parameter",
        ),
        ({"model": "no-such-model", "input": "hi"}, "model", "model_not_found"),
        ({"model": MODEL, "input": "hi", "max_output_tokens": 15}, "max_output_tokens", None),
        ({"model": MODEL, "input": "hi", "temperature": 3}, "temperature", None),
        ({"model": MODEL, "input": "hi", "tool_choice": "sometimes"}, "tool_choice", None),
        ({"model": MODEL, "input": "hi", "store": "maybe"}, "store", None),
        ({"model": MODEL, "input": 42}, "input", None),
    ],
)
def test_invalid_bodies(server: LabkitServer, body: dict[str, Any], param: str, code: str | None) -> None:
    err = error_of(raw_post(server, body), 400)
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    if code is not None:
        assert err["code"] == code


def test_invalid_json_body(server: LabkitServer) -> None:
    err = error_of(raw_post(server, b'{"model": "labkit-spark", "input": '), 400)
    assert err["type"] == "invalid_request_error"
    err = error_of(raw_post(server, b"[1, 2]"), 400)
    assert err["type"] == "invalid_request_error"
    err = error_of(raw_post(server, b"\xff\xfe"), 400)
    assert err["type"] == "invalid_request_error"


def test_unknown_fields_ignored(server: LabkitServer) -> None:
    body = {
        "model": MODEL,
        "input": "hi",
        "frobnicate": {"level": 11},
        "service_tier": "auto",
        "stream_options": {"include_obfuscation": False},
        "client_metadata": {"x": "y"},
    }
    resp = raw_post(server, body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "completed"


def test_sdk_bad_request_error_fields(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="no-such-model", input="hi")
    assert info.value.status_code == 400
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=8)
    assert info.value.param == "max_output_tokens"


def test_unknown_route_error_shape(server: LabkitServer) -> None:
    err = error_of(httpx.get(f"{server.base_url}/nothing-here", headers=auth_headers()), 404)
    assert err["type"] == "not_found_error"


# ---------------------------------------------------------------- 9. API keys


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--api-key", "sk-good"]) as srv:
        yield srv


def test_wrong_key_is_401(keyed_server: LabkitServer) -> None:
    with OpenAI(base_url=keyed_server.base_url, api_key="sk-bad", max_retries=0) as c:
        with pytest.raises(openai.AuthenticationError) as info:
            c.responses.create(model=MODEL, input="hi")
        assert info.value.status_code == 401
        assert info.value.type == "authentication_error"
        with pytest.raises(openai.AuthenticationError):
            c.responses.retrieve("resp_x")
    err = error_of(raw_post(keyed_server, {"model": MODEL, "input": "hi"}, key="sk-bad"), 401)
    assert err["type"] == "authentication_error"
    err = error_of(raw_post(keyed_server, {"model": MODEL, "input": "hi"}, key=None), 401)
    assert err["type"] == "authentication_error"


def test_good_key_works(keyed_server: LabkitServer) -> None:
    with OpenAI(base_url=keyed_server.base_url, api_key="sk-good", max_retries=0) as c:
        r = c.responses.create(model=MODEL, input="hi")
        assert r.status == "completed"
        assert c.responses.retrieve(r.id).id == r.id
        events = list(c.responses.create(model=MODEL, input="hi", stream=True))
        assert events[-1].type == "response.completed"


def test_responses_are_private_to_their_key(
    client: OpenAI, other_client: OpenAI, server: LabkitServer
) -> None:
    r = client.responses.create(model=MODEL, input="secret", tools=[READ_FILE_TOOL])
    with pytest.raises(openai.NotFoundError):
        other_client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        other_client.responses.input_items.list(r.id)
    with pytest.raises(openai.NotFoundError):
        other_client.responses.delete(r.id)
    with pytest.raises(openai.BadRequestError) as info:
        other_client.responses.create(model=MODEL, input="more", previous_response_id=r.id)
    assert info.value.code == "previous_response_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        other_client.responses.create(model=MODEL, input=[{"type": "item_reference", "id": r.output[0].id}])
    assert info.value.param == "input[0].id"
    # no key at all is yet another owner
    error_of(httpx.get(f"{server.base_url}/responses/{r.id}"), 404)
    # the owner still has it, untouched by the failed delete
    assert client.responses.retrieve(r.id).id == r.id


# ---------------------------------------------------------------- 10. replayed items, Codex and Vercel style


CODEX_TOOLS = [
    READ_FILE_TOOL,
    {"type": "web_search"},
    {
        "type": "namespace",
        "name": "mcp__files",
        "description": "An MCP server's tools.",
        "tools": [{"type": "function", "name": "stat", "parameters": {"type": "object", "properties": {}}}],
    },
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch.", "format": {"type": "text"}},
]


def codex_history(call_id: str = "call_codex_1") -> list[dict[str, Any]]:
    return [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the repo."}]},
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "I should list files."}],
            "encrypted_content": "gAAAAABencrypted-blob==",
        },
        {"type": "function_call", "call_id": call_id, "name": "read_file", "arguments": '{"path": "."}'},
        {"type": "function_call_output", "call_id": call_id, "output": "README.md\nlabkit/\n"},
    ]


def test_codex_style_replay_tolerated(client: OpenAI) -> None:
    r = client.responses.create(
        model=MODEL,
        input=codex_history(),
        tools=CODEX_TOOLS,
        store=False,
        include=["reasoning.encrypted_content"],
        reasoning={"summary": "auto"},
        prompt_cache_key="codex-session-1",
        parallel_tool_calls=False,
    )
    assert r.status == "completed"
    assert [t.type for t in r.tools] == [t["type"] for t in CODEX_TOOLS]
    # one of the three allowed calls is already in the history: the next output is a call
    assert r.output[0].type == "function_call"


def test_replayed_items_kept_and_given_ids(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input=codex_history(), tools=CODEX_TOOLS)
    assert r.status == "completed"
    items = client.responses.input_items.list(r.id, order="asc").data
    assert [i.type for i in items] == [
        "message",
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert all(i.id for i in items)
    reasoning, call = items[2], items[3]
    assert reasoning.encrypted_content == "gAAAAABencrypted-blob=="
    assert reasoning.summary[0].text == "I should list files."
    assert call.id.startswith("fc_")
    assert (call.call_id, call.name, call.arguments) == ("call_codex_1", "read_file", '{"path": "."}')


def test_codex_style_streamed(client: OpenAI) -> None:
    events = list(
        client.responses.create(
            model=MODEL,
            input=codex_history(),
            tools=CODEX_TOOLS,
            tool_choice="none",
            store=False,
            stream=True,
        )
    )
    assert collapse_deltas([e.type for e in events]) == TEXT_TURN_EVENTS
    check_sequence(events)


def test_item_reference_resolves(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="Tell me something.")
    msg = first.output[0]
    ref = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "Tell me something."},
            {"type": "item_reference", "id": msg.id},
            {"id": msg.id},  # the type-less form the Vercel AI SDK sends
            {"role": "user", "content": "And more?"},
        ],
    )
    assert ref.status == "completed"
    items = client.responses.input_items.list(ref.id, order="asc").data
    assert [i.type for i in items] == ["message"] * 4
    for resolved in items[1:3]:
        assert resolved.id == msg.id and resolved.role == "assistant"
        assert resolved.content[0].text == first.output_text

    # referencing costs the same prompt tokens as replaying the item itself
    replayed = client.responses.create(
        model=MODEL,
        store=False,
        input=[
            {"role": "user", "content": "Tell me something."},
            {"role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
            {"role": "user", "content": "And more?"},
        ],
    )
    assert replayed.usage.input_tokens == ref.usage.input_tokens


def test_item_reference_to_function_call(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="Read it.", tools=[READ_FILE_TOOL])
    call = first.output[0]
    r = client.responses.create(
        model=MODEL,
        tools=[READ_FILE_TOOL],
        input=[
            {"role": "user", "content": "Read it."},
            {"type": "item_reference", "id": call.id},
            {"type": "function_call_output", "call_id": call.call_id, "output": "hello"},
        ],
    )
    assert r.status == "completed"
    items = client.responses.input_items.list(r.id, order="asc").data
    assert items[1].type == "function_call" and items[1].call_id == call.call_id


def test_unknown_item_reference_is_400(client: OpenAI, server: LabkitServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": "hi"}, {"type": "item_reference", "id": "msg_missing"}],
        )
    assert info.value.param == "input[1].id"
    err = error_of(raw_post(server, {"model": MODEL, "input": [{"id": "msg_missing"}]}), 400)
    assert err["param"] == "input[0].id"


# ---------------------------------------------------------------- 11. raw SSE framing


def check_frames(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n\n")
    assert "[DONE]" not in text
    events = []
    for raw in text.split("\n\n")[:-1]:
        lines = raw.split("\n")
        assert len(lines) == 2, raw
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ")
        kind = lines[0].removeprefix("event: ")
        data = json.loads(lines[1].removeprefix("data: "))
        assert data["type"] == kind
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def test_raw_sse_framing_text(server: LabkitServer) -> None:
    resp, text = sse_frames(server, {"model": MODEL, "input": "hi"})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = check_frames(text)
    assert collapse_deltas([e["type"] for e in events]) == TEXT_TURN_EVENTS
    final = events[-1]["response"]
    assert final["status"] == "completed"
    usage = final["usage"]
    assert {"input_tokens", "output_tokens", "total_tokens", "input_tokens_details"} <= set(usage)
    assert final["output"][0]["content"][0]["text"] == "".join(
        e["delta"] for e in events if e["type"] == "response.output_text.delta"
    )


def test_raw_sse_framing_call_and_incomplete(server: LabkitServer) -> None:
    _, text = sse_frames(
        server, {"model": MODEL, "input": "hi", "tools": [READ_FILE_TOOL], "tool_choice": "required"}
    )
    events = check_frames(text)
    assert collapse_deltas([e["type"] for e in events]) == CALL_TURN_EVENTS
    _, text = sse_frames(server, {"model": MODEL, "input": "Write 200 tokens.", "max_output_tokens": 20})
    events = check_frames(text)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
