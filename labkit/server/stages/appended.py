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
from labkit.api.stages import Stage
from labkit.server.stages.pipeline import Emit, Pipeline
from labkit.server.stages.responder import finish, infer, run_events
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stages.runner import BEFORE_INFERENCE, run_stages
from labkit.server.wscore.conversation import Conversation

NextInput = Callable[[], Awaitable[list[Any]]]  # the client's next response.append or response.inject
# A later segment's stages before inference, after its validation (which a refused input repeats).
AFTER_VALIDATION = BEFORE_INFERENCE - {Stage.VALIDATION}


async def respond_appended(
    pipeline: Pipeline, run: ResponseRun, emit: Emit, next_input: NextInput, *, inject: bool = False
) -> Conversation:
    """Sample segment after segment, waiting at each function call for the client's tool outputs:
    injected (``inject``, the beta's wire), or appended after a ``response.done`` pause."""

    async def stream(events: ResponseEvents, send: Emit) -> Conversation:
        while True:
            stopped, paused = await infer(pipeline, run, events, send)
            if stopped or not paused:
                return await finish(pipeline, run, events, send, stopped)
            # Its spans on every worker (--workers) before the pause's event can reach the client:
            # the beta's cue, the call's item, is queued, not sent, and nothing has waited since.
            pipeline.traces.share_running(run.owner, run.response["id"], run.trace)
            if inject:
                await take_injects(pipeline, run, events, next_input, emit)
            else:
                await send(events.pause(run.unsettled()[0]))
                run.next_segment()
                await resume(pipeline, run, next_input, emit)

    # From its start too: the beta's client asks after each call's item, and the first of a
    # segment's parallel calls comes before the segment's pause.
    pipeline.traces.share_running(run.owner, run.response["id"], run.trace)
    return await run_events(pipeline, run, emit, stream)


async def take_injects(
    pipeline: Pipeline, run: ResponseRun, events: ResponseEvents, next_inject: NextInput, emit: Emit
) -> None:
    """The beta's wait: each inject checked as a create's new items and committed whole
    (``response.inject.created``, numbered in the response's sequence) or refused whole (an
    error; its uplink and validation stay in the segment), until every call the segment sampled
    has its output; then the input classifier and the render stage over what was injected.

    A segment is the work one client request starts, so a commit that leaves calls unanswered
    (the client injects call by call) ends one, and the next inject starts the next.
    """
    waiting = {str(item["call_id"]) for item in run.unsettled()[0] if item["type"] == "function_call"}
    run.next_segment()
    while waiting:
        raw = await next_inject()
        await pipeline.uplink(run.trace)
        committed = len(run.appending)
        try:
            await validated(pipeline, run, raw)
        except APIError as err:
            await emit(err.ws_event())  # as a refused append: no downlink, the segment goes on
            continue
        await emit(events.inject_created())
        waiting -= answered(run.appending[committed:])
        if waiting:
            run.next_segment()
    await run_stages(pipeline.stages, run, AFTER_VALIDATION)


async def resume(pipeline: Pipeline, run: ResponseRun, next_append: NextInput, emit: Emit) -> None:
    """A later segment's stages before inference: the next append that passes validation (a
    refused one is answered, and the rollout keeps waiting; its uplink and validation stay in
    the segment's spans: work done), then the rest as the plan has them on a later segment: the
    input classifier and the render stage over only what was appended (rendered after the
    outputs it answers); the waiting response already holds its hydration and routing."""
    while True:
        raw = await next_append()
        await pipeline.uplink(run.trace)
        try:
            await validated(pipeline, run, raw)
            break
        except APIError as err:
            await emit(err.ws_event())  # an answer to the refused append: no downlink, no segment start
    await run_stages(pipeline.stages, run, AFTER_VALIDATION)


async def validated(pipeline: Pipeline, run: ResponseRun, raw: Any) -> None:
    """Validation of appended (or injected) input, as the plan has it (``accept_append``)."""
    run.body, run.accept = raw, accept_append
    await run_stages(pipeline.stages, run, {Stage.VALIDATION})


def accept_append(run: ResponseRun, raw: Any) -> list[Item]:
    """Appended (or injected) input, validated as a create's: each item, then the checks that
    need the conversation (a compaction item's seal, a tool output answering a call). All of it
    joins what the next segment renders, or none of it."""
    if not isinstance(raw, list):
        raise invalid_request("'input' of response.append must be a list of items.", param="input")
    parsed = [parse_item(item, f"input[{i}]") for i, item in enumerate(raw)]
    appended = [stored_form({"id": new_item_id(i["type"]), **i}) for i in parsed]
    # The waiting calls are in the conversation (unsettled outputs): their outputs are answers;
    # so are the earlier injects of this wait, already committed.
    check_new_items([*run.conversation(), *run.appending], appended, run.owner)
    run.appending = [*run.appending, *appended]
    return appended
