"""POST /v1/responses through the official SDK: a plain create, function tools and chaining,
tool_choice and output length, replayed items as Codex and the Vercel AI SDK send them.

Every test talks to a real ``labkit serve`` subprocess with the unmodified ``openai`` SDK.
Nothing here measures wall-clock time.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from labkit.text.tokenizer import encode_text
from tests.helpers import (
    READ_FILE_TOOL,
    TEXT_TURN_EVENTS,
    collapse_deltas,
    path_tool,
)
from tests.server.http_helpers import BLOCK, MODEL, check_sequence, check_usage, error_of, raw_post

LIST_DIR_TOOL = path_tool("list_dir", "List a directory.")

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
