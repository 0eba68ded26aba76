"""Streaming over HTTP: ``create(stream=True)``, the SDK's ``responses.stream`` helper, several
output items, and the raw SSE bytes (``httpx`` where the framing itself is the point).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from labkit.text.tokenizer import encode_text
from tests.helpers import (
    API_KEY,
    CALL_TURN_EVENTS,
    READ_FILE_TOOL,
    TEXT_TURN_EVENTS,
    collapse_deltas,
)
from tests.server.http_helpers import MODEL, check_sequence, check_usage, sse_frames

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
