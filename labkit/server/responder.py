"""One response, start to finish: the order in which the pipeline's stages run.

``prepare`` runs everything before inference and may refuse the request (an
``APIError`` before any event is sent); ``respond`` streams the events
through ``emit`` and returns the conversation a follow-up can reuse; ``infer``
is one sampling segment of it. ``labkit.server.appended`` is the prototype's
variant of ``respond``; ``cut`` records a response whose client stopped reading.
"""

from __future__ import annotations

from typing import Any

from labkit.api.events import ResponseEvents
from labkit.api.responses import usage
from labkit.api.stages import Stage
from labkit.engine.policies import Call
from labkit.server.pipeline import Emit, Pipeline
from labkit.server.trace_stream import trace_event
from labkit.server.turn import Conversation, Turn

CLIENT_TOO_SLOW = "client_too_slow"  # the error code of a response cut for its slow reader


async def prepare(pipeline: Pipeline, turn: Turn, body: Any) -> None:
    """Validation through the intermediary hop; raises ``APIError`` before any event is sent."""
    pipeline.validate(turn, body)
    await pipeline.hydrate(turn)
    await pipeline.input_safety(turn, pipeline.unseen_input(turn))
    await pipeline.render(turn)
    await pipeline.route(turn)
    await pipeline.intermediary(turn)
    pipeline.open_response(turn)


async def respond(pipeline: Pipeline, turn: Turn, emit: Emit) -> Conversation:
    """Inference and post-inference for a prepared turn, streaming events through ``emit``."""
    events, send = ResponseEvents(turn.response), pipeline.sender(turn, emit)
    try:
        for event in events.start():
            await send(event)
        truncated, _ = await infer(pipeline, turn, events, send)
        return await finish(pipeline, turn, events, send, truncated)
    finally:
        pipeline.bill_if_abandoned(turn)


async def infer(pipeline: Pipeline, turn: Turn, events: ResponseEvents, send: Emit) -> tuple[bool, bool]:
    """One sampling segment: a slot, the prefill, then the policy's actions decoded (unless the
    request asked for the prefill alone); returns (truncated, paused on a call)."""
    assert turn.req is not None
    async with pipeline.queue(turn):
        await pipeline.prefill(turn)
        if not turn.req.generate:
            return False, False
        actions = turn.next_actions()
        await pipeline.downlink(turn)  # a resumed segment's first event: the network before decoding
        truncated = await pipeline.decode(turn, events, actions, send)
    return truncated, bool(actions) and isinstance(actions[-1], Call)


async def finish(
    pipeline: Pipeline, turn: Turn, events: ResponseEvents, send: Emit, truncated: bool
) -> Conversation:
    """Post-inference work, the terminal event, and the conversation a follow-up can reuse."""
    status = "incomplete" if truncated else "completed"
    await pipeline.output_safety(turn, turn.response["output"])
    pipeline.retain(turn)
    reason = "max_output_tokens" if truncated else None
    terminal = events.finish(status, usage(turn.prompt_tokens, turn.cached_tokens, turn.produced), reason)
    await pipeline.storage(turn)
    # Blocking billing holds the answer back; overlapped billing runs beside the next request.
    overlapped = turn.plan[Stage.BILLING].overlapped
    if not overlapped:
        await pipeline.bill(turn, status)
    await send(terminal)
    if overlapped:
        await pipeline.bill(turn, status)
    if pipeline.feed.wants(turn.owner):  # the spans' JSON costs more than the rest of finishing
        spans = [span.to_json() for span in turn.trace.spans]
        pipeline.feed.publish(turn.owner, trace_event(turn.response, turn.design.name, spans))
    return turn.left_behind()


def cut(pipeline: Pipeline, turn: Turn, reason: str) -> None:
    """Record a response cut because its client left too much unread (``labkit.server.outbox``).

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
    if pipeline.feed.wants(turn.owner):
        spans = [span.to_json() for span in turn.trace.spans]
        pipeline.feed.publish(turn.owner, trace_event(turn.response, turn.design.name, spans))
