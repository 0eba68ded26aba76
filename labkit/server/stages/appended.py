"""The appended design: one response for a whole rollout, waiting at each function call.

After a sampling segment ends in a function call, the response waits for the client's tool
outputs; they are checked, classified and rendered onto the same buffer, and sampling resumes
in the same response. What the waiting response already holds (hydration, routing) is not done
again, and the post-inference work runs once, at the end. Two wires carry it
(``docs/appended.md``):

- the official SDK's ``responses_multi_agent=v1`` beta: the calls' own output items are the
  client's cue, each ``response.inject`` is committed whole (``response.inject.created``) or
  refused whole, and sampling resumes once every call has its output;
- labkit's reconstruction of the prototype the articles describe: a ``response.done`` pause,
  answered by one ``response.append``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from labkit.api.errors import APIError, invalid_request
from labkit.api.events import ResponseEvents
from labkit.api.ids import new_item_id
from labkit.api.inject import answered
from labkit.api.items import Item
from labkit.api.requests import check_new_items, parse_item, stored_form
from labkit.server.stages.pipeline import Emit, Pipeline
from labkit.server.stages.responder import finish, infer, run_events
from labkit.server.stages.turn import ResponseRun
from labkit.server.wscore.conversation import Conversation

NextInput = Callable[[], Awaitable[list[Any]]]  # the client's next response.append or response.inject


async def respond_appended(
    pipeline: Pipeline, turn: ResponseRun, emit: Emit, next_input: NextInput, *, inject: bool = False
) -> Conversation:
    """Sample segment after segment, waiting at each function call for the client's tool outputs:
    injected (``inject``, the beta's wire), or appended after a ``response.done`` pause."""

    async def run(events: ResponseEvents, send: Emit) -> Conversation:
        while True:
            stopped, paused = await infer(pipeline, turn, events, send)
            if stopped or not paused:
                return await finish(pipeline, turn, events, send, stopped)
            # Its spans on every worker (--workers) before the pause's event can reach the client:
            # the beta's cue, the call's item, is queued, not sent, and nothing has waited since.
            pipeline.traces.share_running(turn.owner, turn.response["id"], turn.trace)
            if inject:
                await take_injects(pipeline, turn, events, next_input, emit)
            else:
                await send(events.pause(turn.unsettled()[0]))
                turn.next_segment()
                await resume(pipeline, turn, next_input, emit)

    # From its start too: the beta's client asks after each call's item, and the first of a
    # segment's parallel calls comes before the segment's pause.
    pipeline.traces.share_running(turn.owner, turn.response["id"], turn.trace)
    return await run_events(pipeline, turn, emit, run)


async def take_injects(
    pipeline: Pipeline, turn: ResponseRun, events: ResponseEvents, next_inject: NextInput, emit: Emit
) -> None:
    """The beta's wait: each inject checked as a create's new items and committed whole
    (``response.inject.created``, numbered in the response's sequence) or refused whole (an
    error; its uplink and validation stay in the segment), until every call the segment sampled
    has its output; then the input classifier and the render stage over what was injected.

    A segment is the work one client request starts, so a commit that leaves calls unanswered
    (the client injects call by call) ends one, and the next inject starts the next.
    """
    waiting = {str(item["call_id"]) for item in turn.unsettled()[0] if item["type"] == "function_call"}
    turn.next_segment()
    while waiting:
        raw = await next_inject()
        await pipeline.uplink(turn.trace)
        committed = len(turn.appending)
        try:
            pipeline.validate(turn, raw, accept_append)
        except APIError as err:
            await emit(err.ws_event())  # as a refused append: no downlink, the segment goes on
            continue
        await emit(events.inject_created())
        waiting -= answered(turn.appending[committed:])
        if waiting:
            turn.next_segment()
    await pipeline.input_safety(turn, turn.appending)
    await pipeline.render(turn)


async def resume(pipeline: Pipeline, turn: ResponseRun, next_append: NextInput, emit: Emit) -> None:
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
            await emit(err.ws_event())  # an answer to the refused append: no downlink, no segment start
    # New input is new to the classifier too: the prototype stopped re-reading the history, not this.
    await pipeline.input_safety(turn, turn.appending)
    await pipeline.render(turn)


def accept_append(turn: ResponseRun, raw: Any) -> list[Item]:
    """Appended (or injected) input, validated as a create's: each item, then the checks that
    need the conversation (a compaction item's seal, a tool output answering a call). All of it
    joins what the next segment renders, or none of it."""
    if not isinstance(raw, list):
        raise invalid_request("'input' of response.append must be a list of items.", param="input")
    parsed = [parse_item(item, f"input[{i}]") for i, item in enumerate(raw)]
    appended = [stored_form({"id": new_item_id(i["type"]), **i}) for i in parsed]
    # The waiting calls are in the conversation (unsettled outputs): their outputs are answers;
    # so are the earlier injects of this wait, already committed.
    check_new_items([*turn.conversation(), *turn.appending], appended, turn.owner)
    turn.appending = [*turn.appending, *appended]
    return appended
