"""One response, start to finish: the order in which it runs the pipeline's stages
(``labkit.server.stages.pipeline`` lists them).

``prepare`` runs everything before inference and may refuse the request (an
``APIError`` before any event is sent); ``respond`` streams the events
through ``emit`` and returns the conversation a follow-up can reuse; ``infer``
is one sampling segment of it; ``finish`` its end. Before and after inference, the stages are
the runner's (``labkit.server.stages.runner``): those the design's plan names, in its order.
``labkit.server.stages.appended`` is the appended design's variant of ``respond``; ``cut``
records a response whose client stopped reading.

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
from labkit.engine.policies import Call
from labkit.server.edge.outbox import SlowReader
from labkit.server.stages.compaction_pass import compact_first
from labkit.server.stages.pipeline import Emit, Pipeline
from labkit.server.stages.post_inference import bill_if_abandoned
from labkit.server.stages.pre_inference import open_response
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stages.runner import AFTER_INFERENCE, BEFORE_INFERENCE, RECORDING, run_stages
from labkit.server.stores.trace_stream import trace_event
from labkit.server.wscore.conversation import Conversation

CLIENT_TOO_SLOW = "client_too_slow"  # the error code of a response cut for its slow reader


class StreamFailed(Exception):
    """A response failed after ``response.created``; its ``response.failed`` has been sent."""

    def __init__(self, error: APIError) -> None:
        super().__init__(error.message)
        self.error = error


async def prepare(pipeline: Pipeline, run: ResponseRun, body: Any) -> None:
    """Validation of ``body`` through the intermediary hop, as the plan has them; raises
    ``APIError`` before any event is sent."""
    run.body = body
    await run_stages(pipeline.stages, run, BEFORE_INFERENCE)
    open_response(run, pipeline.scripts, pipeline.traces)


async def respond(pipeline: Pipeline, run: ResponseRun, emit: Emit) -> Conversation:
    """Inference and post-inference for a prepared run, streaming events through ``emit``."""

    async def stream(events: ResponseEvents, send: Emit) -> Conversation:
        assert run.req is not None
        compaction = run.req.compaction
        if compaction is not None and run.buffer is not None:
            assert run.model is not None
            if len(run.buffer) > (compaction.threshold or run.model.compact_threshold):
                await compact_first(pipeline, run, events, send)
        stopped, _ = await infer(pipeline, run, events, send)
        return await finish(pipeline, run, events, send, stopped)

    return await run_events(pipeline, run, emit, stream)


async def run_events(
    pipeline: Pipeline,
    run: ResponseRun,
    emit: Emit,
    stream: Callable[[ResponseEvents, Emit], Awaitable[Conversation]],
) -> Conversation:
    """A response's events: ``response.created`` and ``response.in_progress``, then ``stream``'s, and
    ``response.failed`` if it fails after them (``StreamFailed``); a response that ended early
    still pays for its prompt."""
    events = ResponseEvents(run.response)
    created = False
    try:
        await pipeline.downlink(run)  # the first segment's first event is response.created
        for event in events.start():
            await emit(event)
            created = True
        return await stream(events, emit)
    except (asyncio.CancelledError, SlowReader, StreamFailed):
        raise
    except Exception as exc:
        if not created or events.ended:
            raise  # before response.created, or after its terminal event: not a response's end
        error = as_api_error(exc)
        await emit(fail(run, events, error))
        raise StreamFailed(error) from exc
    finally:
        bill_if_abandoned(run, pipeline.billing)


def fail(run: ResponseRun, events: ResponseEvents, error: APIError) -> Event:
    """``response.failed``: the Response, ``status: failed``, with the error that ended it."""
    run.response["error"] = {"code": error.code or "server_error", "message": error.message}
    return events.finish("failed", usage(run.prompt_tokens, run.cached_tokens, run.produced))


def failed_event(response: dict[str, Any], sequence_number: int) -> Event:
    """``response.failed`` for a response already marked failed (a cut: ``cut``), numbered after
    the last event it produced."""
    return {"type": RESPONSE_FAILED, "response": json_copy(response), "sequence_number": sequence_number}


async def infer(
    pipeline: Pipeline, run: ResponseRun, events: ResponseEvents, send: Emit
) -> tuple[str | None, bool]:
    """One sampling segment: a slot, the prefill, then the policy's actions decoded (unless the
    request asked for the prefill alone); returns why it stopped early (``max_output_tokens``,
    ``steered``, or None) and whether it paused on a call."""
    assert run.req is not None
    async with pipeline.queue(run):
        await pipeline.prefill(run)
        if not run.req.generate:
            return None, False
        actions = run.next_actions()
        # Once per segment: the first segment paid it before response.created; a resumed one
        # pays it here, before its first delta.
        await pipeline.downlink(run)
        stopped = await pipeline.decode(run, events, actions, send)
    return stopped, bool(actions) and isinstance(actions[-1], Call) and stopped is None


async def finish(
    pipeline: Pipeline, run: ResponseRun, events: ResponseEvents, send: Emit, stopped: str | None
) -> Conversation:
    """Post-inference work, the terminal event, and the conversation a follow-up can reuse."""
    status = "incomplete" if stopped else "completed"
    await run_stages(pipeline.stages, run, AFTER_INFERENCE, last=True)
    terminal = events.finish(status, usage(run.prompt_tokens, run.cached_tokens, run.produced), stopped)
    # Recorded before the answer leaves; overlapped billing runs beside the next request instead.
    await run_stages(pipeline.stages, run, RECORDING, last=True)
    await send(terminal)
    events.sent(terminal)
    await run_stages(pipeline.stages, run, RECORDING, last=True, overlapped=True)
    publish(pipeline, run)
    return run.left_behind()


def cut(pipeline: Pipeline, run: ResponseRun, reason: str) -> None:
    """Record a response cut because its client left too much unread (``labkit.server.edge.outbox``).

    It ends ``failed`` with the error ``client_too_slow`` and is billed as abandoned; it is not
    stored, unless the cut came at its terminal event (a response is stored just before that).
    The span of the stage it was cut in (its last) says why, and the key's trace subscribers
    see it fail.

        cut(pipeline, run, "client too slow: 1048600 bytes unread (limit 1048576)")
    """
    if not run.response:
        return  # cut before it had an id: nothing to record
    run.response.update(status="failed", error={"code": CLIENT_TOO_SLOW, "message": reason})
    if run.trace.spans:
        run.trace.spans[-1].detail["cut"] = reason
    publish(pipeline, run)


def publish(pipeline: Pipeline, run: ResponseRun) -> None:
    """The finished response's trace event: kept (``TraceStore.finish``: the trace stream's
    history, and with ``--workers`` ``GET /v1/labkit/traces`` on every worker), then handed to the
    live subscribers allowed to see it. Synchronous, and called after the terminal event is only
    queued: the event is kept before the client can hear that the response finished."""
    spans = [span.to_json() for span in run.trace.spans]
    event = trace_event(run.response, run.design.name, spans)
    pipeline.traces.finish(run.owner, event)
    pipeline.feed.publish(run.owner, event)
