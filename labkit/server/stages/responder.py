"""One response, start to finish: the order in which it runs the pipeline's stages
(``labkit.server.stages.pipeline`` lists them).

``prepare`` runs everything before inference and may refuse the request (an
``APIError`` before any event is sent); ``respond`` streams the events
through ``emit`` and returns the conversation a follow-up can reuse; ``infer``
is one sampling segment of it. ``labkit.server.stages.appended`` is the appended design's
variant of ``respond``; ``cut`` records a response whose client stopped reading.

The downlink is paid here, where a segment's first event leaves: before ``response.created``
(``run_events``), and before a resumed segment's first delta (``infer``).

A failure after ``response.created`` ends the response with ``response.failed`` (the Response,
``status: failed`` and its ``error``) and raises ``StreamFailed``: the events are over, and
nothing more is sent for it. A failure before that raises as it is, for the transport to
answer with an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from labkit.api.errors import APIError, as_api_error
from labkit.api.event_types import RESPONSE_FAILED
from labkit.api.events import Event, ResponseEvents, json_copy
from labkit.api.responses import usage
from labkit.api.stages import Stage
from labkit.engine.policies import Call
from labkit.server.edge.outbox import SlowReader
from labkit.server.stages.compaction_pass import compact_first
from labkit.server.stages.pipeline import Emit, Pipeline
from labkit.server.stages.post_inference import bill_if_abandoned
from labkit.server.stages.pre_inference import open_response, unseen_input
from labkit.server.stages.turn import ResponseRun
from labkit.server.stores.trace_stream import trace_event
from labkit.server.wscore.conversation import Conversation

CLIENT_TOO_SLOW = "client_too_slow"  # the error code of a response cut for its slow reader


class StreamFailed(Exception):
    """A response failed after ``response.created``; its ``response.failed`` has been sent."""

    def __init__(self, error: APIError) -> None:
        super().__init__(error.message)
        self.error = error


async def prepare(pipeline: Pipeline, turn: ResponseRun, body: Any) -> None:
    """Validation through the intermediary hop; raises ``APIError`` before any event is sent."""
    pipeline.validate(turn, body)
    await pipeline.hydrate(turn)
    await pipeline.input_safety(turn, unseen_input(turn))
    await pipeline.render(turn)
    await pipeline.route(turn)
    await pipeline.intermediary(turn)
    open_response(turn, pipeline.scripts, pipeline.traces)


async def respond(pipeline: Pipeline, turn: ResponseRun, emit: Emit) -> Conversation:
    """Inference and post-inference for a prepared turn, streaming events through ``emit``."""

    async def run(events: ResponseEvents, send: Emit) -> Conversation:
        assert turn.req is not None
        compaction = turn.req.compaction
        if compaction is not None and turn.buffer is not None:
            assert turn.model is not None
            if len(turn.buffer) > (compaction.threshold or turn.model.compact_threshold):
                await compact_first(pipeline, turn, events, send)
        stopped, _ = await infer(pipeline, turn, events, send)
        return await finish(pipeline, turn, events, send, stopped)

    return await run_events(pipeline, turn, emit, run)


async def run_events(
    pipeline: Pipeline,
    turn: ResponseRun,
    emit: Emit,
    run: Callable[[ResponseEvents, Emit], Awaitable[Conversation]],
) -> Conversation:
    """A response's events: ``response.created`` and ``response.in_progress``, then ``run``'s, and
    ``response.failed`` if it fails after them (``StreamFailed``); a response that ended early
    still pays for its prompt."""
    events = ResponseEvents(turn.response)
    created = False
    try:
        await pipeline.downlink(turn)  # the first segment's first event is response.created
        for event in events.start():
            await emit(event)
            created = True
        return await run(events, emit)
    except (asyncio.CancelledError, SlowReader, StreamFailed):
        raise
    except Exception as exc:
        if not created or events.ended:
            raise  # before response.created, or after its terminal event: not a response's end
        error = as_api_error(exc)
        await emit(fail(turn, events, error))
        raise StreamFailed(error) from exc
    finally:
        bill_if_abandoned(turn, pipeline.billing)


def fail(turn: ResponseRun, events: ResponseEvents, error: APIError) -> Event:
    """``response.failed``: the Response, ``status: failed``, with the error that ended it."""
    turn.response["error"] = {"code": error.code or "server_error", "message": error.message}
    return events.finish("failed", usage(turn.prompt_tokens, turn.cached_tokens, turn.produced))


def failed_event(response: dict[str, Any], sequence_number: int) -> Event:
    """``response.failed`` for a response already marked failed (a cut: ``cut``), numbered after
    the last event it produced."""
    return {"type": RESPONSE_FAILED, "response": json_copy(response), "sequence_number": sequence_number}


async def infer(
    pipeline: Pipeline, turn: ResponseRun, events: ResponseEvents, send: Emit
) -> tuple[str | None, bool]:
    """One sampling segment: a slot, the prefill, then the policy's actions decoded (unless the
    request asked for the prefill alone); returns why it stopped early (``max_output_tokens``,
    ``steered``, or None) and whether it paused on a call."""
    assert turn.req is not None
    async with pipeline.queue(turn):
        await pipeline.prefill(turn)
        if not turn.req.generate:
            return None, False
        actions = turn.next_actions()
        # Once per segment: the first segment paid it before response.created; a resumed one
        # pays it here, before its first delta.
        await pipeline.downlink(turn)
        stopped = await pipeline.decode(turn, events, actions, send)
    return stopped, bool(actions) and isinstance(actions[-1], Call) and stopped is None


async def finish(
    pipeline: Pipeline, turn: ResponseRun, events: ResponseEvents, send: Emit, stopped: str | None
) -> Conversation:
    """Post-inference work, the terminal event, and the conversation a follow-up can reuse."""
    status = "incomplete" if stopped else "completed"
    await pipeline.output_safety(turn, turn.response["output"])
    pipeline.retain(turn)
    terminal = events.finish(status, usage(turn.prompt_tokens, turn.cached_tokens, turn.produced), stopped)
    await pipeline.storage(turn)
    # Blocking billing holds the answer back; overlapped billing runs beside the next request.
    overlapped = turn.plan[Stage.BILLING].overlapped
    if not overlapped:
        await pipeline.bill(turn, status)
    await send(terminal)
    events.sent(terminal)
    if overlapped:
        await pipeline.bill(turn, status)
    publish(pipeline, turn)
    return turn.left_behind()


def cut(pipeline: Pipeline, turn: ResponseRun, reason: str) -> None:
    """Record a response cut because its client left too much unread (``labkit.server.edge.outbox``).

    It ends ``failed`` with the error ``client_too_slow`` and is billed as abandoned; it is not
    stored, unless the cut came at its terminal event (a response is stored just before that).
    The span of the stage it was cut in (its last) says why, and the key's trace subscribers
    see it fail.

        cut(pipeline, turn, "client too slow: 1048600 bytes unread (limit 1048576)")
    """
    if not turn.response:
        return  # cut before it had an id: nothing to record
    turn.response.update(status="failed", error={"code": CLIENT_TOO_SLOW, "message": reason})
    if turn.trace.spans:
        turn.trace.spans[-1].detail["cut"] = reason
    publish(pipeline, turn)


def publish(pipeline: Pipeline, turn: ResponseRun) -> None:
    """The finished response's trace event: kept (``TraceStore.finish``: the trace stream's
    history, and with ``--workers`` ``GET /v1/labkit/traces`` on every worker), then handed to the
    live subscribers allowed to see it. Synchronous, and called after the terminal event is only
    queued: the event is kept before the client can hear that the response finished."""
    spans = [span.to_json() for span in turn.trace.spans]
    event = trace_event(turn.response, turn.design.name, spans)
    pipeline.traces.finish(turn.owner, event)
    pipeline.feed.publish(turn.owner, event)
