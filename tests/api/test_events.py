"""The event sequence of a turn, as ``ResponseEvents`` builds it: the documented order and
fields, output indices, snapshots, and the official SDK parsing every event.
"""

from __future__ import annotations

from typing import Any

import pytest

from labkit.api.events import ResponseEvents
from labkit.api.responses import usage
from tests.api.turns import SDK_EVENT, fresh_response, text_turn

# ---------------------------------------------------------------- the event sequence


def call_turn() -> tuple[list[dict], ResponseEvents]:
    ev = ResponseEvents(fresh_response(tools=[{"type": "function", "name": "ls"}]))
    events = [*ev.start(), *ev.begin_call("fc_1", "call_1", "ls")]
    events += [ev.delta(chunk) for chunk in ('{"pa', 'th": "."}')]
    events += ev.end_item()
    events.append(ev.finish("completed", usage(20, 16, 5)))
    return events, ev


def test_a_text_turn_follows_the_documented_order() -> None:
    events, _ = text_turn()
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_a_text_turns_events_carry_the_right_fields() -> None:
    events, _ = text_turn()
    created, in_progress, added, part_added, *deltas, text_done, part_done, item_done, completed = events
    for e in (created, in_progress):
        assert e["response"]["status"] == "in_progress"
        assert e["response"]["output"] == []
    assert added["output_index"] == 0
    assert added["item"] == {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    assert part_added["part"]["type"] == "output_text"
    assert part_added["part"]["text"] == ""
    for e in (part_added, *deltas, text_done, part_done):
        assert (e["item_id"], e["output_index"], e["content_index"]) == ("msg_1", 0, 0)
    for e in deltas:
        assert e["logprobs"] == []
    text = "".join(e["delta"] for e in deltas)
    assert text == "Hello, world\n✓"
    assert text_done["text"] == text
    assert part_done["part"] == {"type": "output_text", "text": text, "annotations": []}
    assert item_done["output_index"] == 0
    assert item_done["item"]["status"] == "completed"
    assert item_done["item"]["content"] == [part_done["part"]]
    response = completed["response"]
    assert response["status"] == "completed"
    assert response["output"] == [item_done["item"]]
    assert response["usage"] == usage(12, 0, 3)
    assert response["completed_at"] is not None


def test_a_function_call_turn_follows_the_documented_order() -> None:
    events, _ = call_turn()
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    _, _, added, *deltas, args_done, item_done, completed = events
    assert added["item"] == {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "ls",
        "arguments": "",
        "status": "in_progress",
    }
    for e in (*deltas, args_done):
        assert (e["item_id"], e["output_index"]) == ("fc_1", 0)
    assert (args_done["name"], args_done["arguments"]) == ("ls", '{"path": "."}')
    assert item_done["item"] == {**added["item"], "arguments": '{"path": "."}', "status": "completed"}
    assert completed["response"]["output"] == [item_done["item"]]
    assert completed["response"]["usage"]["input_tokens_details"]["cached_tokens"] == 16


def test_output_indices_count_the_items_before() -> None:
    ev = ResponseEvents(fresh_response())
    events = [*ev.start(), *ev.begin_message("msg_1"), ev.delta("Let me look."), *ev.end_item()]
    events += [*ev.begin_call("fc_1", "call_1", "ls"), ev.delta("{}"), *ev.end_item()]
    events.append(ev.finish("completed", usage(1, 0, 2)))
    indices = [e["output_index"] for e in events if "output_index" in e]
    assert indices == [0] * 6 + [1] * 4
    assert [item["type"] for item in events[-1]["response"]["output"]] == ["message", "function_call"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_earlier_snapshots_are_not_changed_by_later_events() -> None:
    events, ev = text_turn()
    assert events[0]["response"]["output"] == []
    assert events[0]["response"]["status"] == "in_progress"
    assert events[2]["item"]["content"] == []
    ev.response["output"].clear()
    assert events[-1]["response"]["output"] != []


def test_an_incomplete_response_ends_with_its_reason() -> None:
    ev = ResponseEvents(fresh_response(max_output_tokens=16))
    events = [*ev.start(), *ev.begin_message("msg_1"), ev.delta("cut"), *ev.end_item("incomplete")]
    events.append(ev.finish("incomplete", usage(5, 0, 16), incomplete_reason="max_output_tokens"))
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize("turn", [text_turn, call_turn])
def test_the_official_sdk_parses_every_event(turn: Any) -> None:
    events, _ = turn()
    for event in events[:-1]:
        parsed = SDK_EVENT.validate_python(event)
        assert parsed.type == event["type"]
        assert parsed.sequence_number == event["sequence_number"]


@pytest.mark.parametrize("turn", [text_turn, call_turn])
def test_the_official_sdk_parses_the_terminal_event(turn: Any) -> None:
    events, _ = turn()
    parsed = SDK_EVENT.validate_python(events[-1])
    assert parsed.response.usage.input_tokens == events[-1]["response"]["usage"]["input_tokens"]
