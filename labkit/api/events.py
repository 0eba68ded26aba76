"""The streaming event sequence of one response, shared by the SSE and WebSocket paths.

``ResponseEvents`` is a pure state machine: each method returns the event
dicts to send, numbered from 0, with output and content indices kept right.
It never touches a socket.

    >>> from labkit.api.responses import usage
    >>> ev = ResponseEvents({"id": "resp_1", "status": "in_progress", "output": []})
    >>> types = [e["type"] for e in ev.start()]
    >>> types += [e["type"] for e in ev.begin_message("msg_1")]
    >>> types += [ev.delta("Hi")["type"]]
    >>> types += [e["type"] for e in ev.end_item()]
    >>> types += [ev.finish("completed", usage(5, 0, 1))["type"]]
    >>> types  # doctest: +NORMALIZE_WHITESPACE
    ['response.created', 'response.in_progress', 'response.output_item.added',
     'response.content_part.added', 'response.output_text.delta', 'response.output_text.done',
     'response.content_part.done', 'response.output_item.done', 'response.completed']
"""

from __future__ import annotations

import copy
from typing import Any

from labkit.api import event_types as types
from labkit.api.responses import finish as finish_response

Event = dict[str, Any]


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists, scalars): what a snapshot event needs, at a
    fraction of ``copy.deepcopy``'s cost (no memo, no dispatch for JSON's own types).

    >>> original = {"output": [{"content": [{"text": "hi"}]}], "n": 1}
    >>> snapshot = json_copy(original)
    >>> snapshot == original, snapshot["output"][0] is original["output"][0]
    (True, False)
    """
    if isinstance(value, dict):
        return {key: json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    if value is None or isinstance(value, str | int | float):  # immutable (bool is an int)
        return value
    return copy.deepcopy(value)  # anything else, to be safe


class ResponseEvents:
    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response
        self.sequence_number = 0
        self.ended = False  # its terminal event has been sent
        self._item: dict[str, Any] | None = None
        self._text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, **fields, "sequence_number": self.sequence_number}
        self.sequence_number += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return json_copy(self.response)

    # ------------------------------------------------------------ response lifecycle

    def start(self) -> list[Event]:
        return [
            self._event(types.RESPONSE_CREATED, response=self._snapshot()),
            self._event(types.RESPONSE_IN_PROGRESS, response=self._snapshot()),
        ]

    def finish(self, status: str, usage: dict[str, Any], incomplete_reason: str | None = None) -> Event:
        finish_response(self.response, status, usage, incomplete_reason=incomplete_reason)
        return self._event(types.TERMINAL_EVENT[status], response=self._snapshot())

    def sent(self, event: Event) -> None:
        """Note an event as sent: after the terminal one, the response has ended."""
        if event["type"] in types.TERMINAL_EVENTS:
            self.ended = True

    @property
    def output_index(self) -> int:
        return len(self.response["output"])

    # ------------------------------------------------------------ output items

    def begin_message(self, item_id: str) -> list[Event]:
        self._item = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        self._text = []
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            self._event(
                types.OUTPUT_ITEM_ADDED,
                output_index=self.output_index,
                item=json_copy(self._item),
            ),
            self._event(
                types.CONTENT_PART_ADDED,
                item_id=item_id,
                output_index=self.output_index,
                content_index=0,
                part=part,
            ),
        ]

    def begin_call(self, item_id: str, call_id: str, name: str) -> list[Event]:
        self._item = {
            "type": "function_call",
            "id": item_id,
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        self._text = []
        return [
            self._event(
                types.OUTPUT_ITEM_ADDED,
                output_index=self.output_index,
                item=json_copy(self._item),
            )
        ]

    def delta(self, text: str) -> Event:
        """A chunk of the open item's text (message text or call arguments): a small dict, built
        directly (one per delta; nothing of the response is copied)."""
        item = self._item
        assert item is not None, "no output item is open"
        self._text.append(text)
        number, self.sequence_number = self.sequence_number, self.sequence_number + 1
        if item["type"] == "message":
            return {
                "type": types.OUTPUT_TEXT_DELTA,
                "item_id": item["id"],
                "output_index": len(self.response["output"]),
                "content_index": 0,
                "delta": text,
                "logprobs": [],
                "sequence_number": number,
            }
        return {
            "type": types.ARGUMENTS_DELTA,
            "item_id": item["id"],
            "output_index": len(self.response["output"]),
            "delta": text,
            "sequence_number": number,
        }

    def end_item(self, status: str = "completed") -> list[Event]:
        """Close the open item; it joins the response's output."""
        item, text = self._item, "".join(self._text)
        assert item is not None, "no output item is open"
        index = self.output_index
        item["status"] = status
        events: list[Event] = []
        if item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": []}
            item["content"] = [part]
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(self._event(types.OUTPUT_TEXT_DONE, **common, text=text, logprobs=[]))
            events.append(self._event(types.CONTENT_PART_DONE, **common, part=part))
        else:
            item["arguments"] = text
            events.append(
                self._event(
                    types.ARGUMENTS_DONE,
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=text,
                )
            )
        self.response["output"].append(item)
        events.append(self._event(types.OUTPUT_ITEM_DONE, output_index=index, item=json_copy(item)))
        self._item = None
        return events

    # ------------------------------------------------------------ context_management: compaction

    def begin_compaction(self, item_id: str) -> Event:
        """A compaction output item opens: its summary is being sampled (its content comes at the end)."""
        self._item = {"type": "compaction", "id": item_id, "encrypted_content": ""}
        return self._event(
            types.OUTPUT_ITEM_ADDED, output_index=self.output_index, item=json_copy(self._item)
        )

    def compacting(self) -> Event:
        """``response.compaction.compacting``: more of the summary was sampled (it carries none of it)."""
        assert self._item is not None, "no compaction item is open"
        return self._event(
            types.COMPACTION_COMPACTING, item_id=self._item["id"], output_index=self.output_index
        )

    def end_compaction(self, encrypted_content: str) -> Event:
        """The compaction item is done: sealed, it joins the response's output."""
        item, index = self._item, self.output_index
        assert item is not None, "no compaction item is open"
        item["encrypted_content"] = encrypted_content
        self.response["output"].append(item)
        self._item = None
        return self._event(types.OUTPUT_ITEM_DONE, output_index=index, item=json_copy(item))

    # ------------------------------------------------------------ labkit extension: appended rollouts

    def pause(self, pending: list[dict[str, Any]]) -> Event:
        """``response.done``: sampling paused on function calls the client must run and append.

        The response stays open; the client answers with ``response.append``.
        """
        return self._event(
            types.RESPONSE_DONE,
            response_id=self.response["id"],
            status="requires_action",
            pending_calls=json_copy([item for item in pending if item["type"] == "function_call"]),
        )

    # ------------------------------------------------------------ the multi-agent beta: response.inject

    def inject_created(self) -> Event:
        """``response.inject.created``: an inject's items are committed to this response (the
        commit point; sampling resumes once every call it waits on is answered)."""
        return self._event(types.INJECT_CREATED, response_id=self.response["id"])
