"""The appended-rollout prototype (labkit extension): one response for a whole rollout.

After a sampling segment ends in a function call, the server sends
``response.done`` with the pending calls and waits for the client's
``response.append``; the appended items are checked, classified and rendered
onto the same buffer, and sampling resumes in the same response. What the
paused response already holds (hydration, routing) is not done again, and the
post-inference work runs once, at the end. The wire format is in
``docs/appended.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from labkit.api.errors import APIError, invalid_request
from labkit.api.events import ResponseEvents
from labkit.api.ids import new_item_id
from labkit.api.requests import check_new_items, parse_item, stored_form
from labkit.server.pipeline import Emit, Pipeline
from labkit.server.responder import finish, infer, run_events
from labkit.server.turn import Conversation, Turn

Item = dict[str, Any]


async def respond_appended(
    pipeline: Pipeline, turn: Turn, emit: Emit, next_append: Callable[[], Awaitable[list[Any]]]
) -> Conversation:
    """Sample segment after segment, pausing at each function call until the client appends."""

    async def run(events: ResponseEvents, send: Emit) -> Conversation:
        while True:
            stopped, paused = await infer(pipeline, turn, events, send)
            if stopped or not paused:
                return await finish(pipeline, turn, events, send, stopped)
            await send(events.pause(turn.unsettled()[0]))
            turn.next_segment()
            await resume(pipeline, turn, next_append, emit)

    return await run_events(pipeline, turn, emit, run)


async def resume(
    pipeline: Pipeline, turn: Turn, next_append: Callable[[], Awaitable[list[Any]]], emit: Emit
) -> None:
    """A later segment's stages before inference: the next append that passes validation (a
    refused one is answered, and the rollout keeps waiting; its uplink and validation stay in
    the segment's spans: work done), then the input classifier and the render stage over
    only what was appended (rendered after the outputs it answers)."""
    while True:
        raw = await next_append()
        await pipeline.uplink(turn.trace)
        try:
            pipeline.validate(turn, raw, accept_append)
            break
        except APIError as err:
            await emit(err.ws_event())  # not through the turn's sender: no downlink, no segment start
    # New input is new to the classifier too: the prototype stopped re-reading the history, not this.
    await pipeline.input_safety(turn, turn.appending)
    await pipeline.render(turn)


def accept_append(turn: Turn, raw: Any) -> list[Item]:
    """Appended input, validated as a create's: each item, then the checks that need the
    conversation (a compaction item's seal, a tool output answering a call)."""
    if not isinstance(raw, list):
        raise invalid_request("'input' of response.append must be a list of items.", param="input")
    parsed = [parse_item(item, f"input[{i}]") for i, item in enumerate(raw)]
    appended = [stored_form({"id": new_item_id(i["type"]), **i}) for i in parsed]
    # The pending calls are in the conversation (unsettled outputs): their outputs are answers.
    check_new_items(turn.conversation(), appended, turn.owner)
    turn.appending = appended
    return appended
