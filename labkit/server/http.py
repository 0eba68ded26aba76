"""The HTTP endpoints: create (JSON or SSE), retrieve, delete, input items, traces."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from labkit import limits
from labkit.api import safejson
from labkit.api.errors import as_api_error, invalid_request, response_not_found, too_large
from labkit.api.events import Event
from labkit.api.extensions import DESIGN_HEADER
from labkit.api.sse import frame
from labkit.server.config import config_of
from labkit.server.edge.network import drop_if_stuck, transport_of
from labkit.server.edge.outbox import Outbox, SlowReader
from labkit.server.requested_design import requested_design
from labkit.server.stages.compaction_pass import compact
from labkit.server.stages.door import Door
from labkit.server.stages.pipeline import Pipeline
from labkit.server.stages.responder import CLIENT_TOO_SLOW, StreamFailed, cut, failed_event, prepare, respond
from labkit.server.stages.response_run import ResponseRun


def pipeline_of(request: Request) -> Pipeline:
    return request.app.state.pipeline


def owner_of(request: Request) -> str:
    return pipeline_of(request).keys.owner(request.headers.get("authorization"))


log = logging.getLogger("uvicorn.error")  # the server's own log, as uvicorn configures it

LAST_FRAME_GRACE_S = 2.0  # how long a cut stream's last frame may wait for the client
# The status logged for an answer its client left before it was sent (nginx's "client closed request").
CLIENT_CLOSED_REQUEST = 499

T = TypeVar("T")


class ClientGone(Exception):
    """The client's connection closed before its answer was ready: the work for it was cancelled."""


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, unless the client's connection closes first: then ``work`` is cancelled
    (its engine slot and its key's caps freed) and ``ClientGone`` raised.

    Call it once the body has been read: from then on, the only message a request receives is
    its ``http.disconnect`` (``labkit.server.edge.network`` turns a client that shut its side and
    vanished into one too). A streamed answer needs no such watch: Starlette's
    ``StreamingResponse`` cancels its body on the disconnect itself.

        await unless_gone(request, respond(pipeline, run, emit=_discard))
    """
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():  # gone, or this request itself was cancelled (a shutdown)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise ClientGone
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass  # a body read already: nothing else comes


async def read_body(request: Request) -> bytes:
    """The body, refused with a 413 past the server's limit (``labkit serve --max-body-bytes``).

    A declared ``content-length`` over the limit is refused before reading; a chunked body
    is read only as far as the limit, so an oversized one never sits in memory (and in at most
    ``limits.MAX_BODY_CHUNKS`` chunks: ``labkit.server.edge.wire_limits``). A client that leaves
    mid-body is one line in the log.
    """
    limit = config_of(request.app).limits.max_body_bytes
    refusal = too_large(f"The request body is larger than this server's limit of {limit} bytes.")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and len(declared) < 20 and int(declared) > limit:
        raise refusal
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise refusal
            chunks.append(chunk)
    except ClientDisconnect:  # nobody is left to answer: one line in the log, not a traceback
        client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
        log.warning(
            "%s closed its connection before the body of %s %s arrived",
            client,
            request.method,
            request.url.path,
        )
        raise invalid_request("The connection closed before the request body arrived.") from None
    return b"".join(chunks)


async def read_json(request: Request) -> Any:
    """The body as JSON: bounded in size and depth, valid Unicode, no NaN (``labkit.api.safejson``)."""
    return safejson.loads(await read_body(request))


def address_of(request: Request) -> tuple[str, int] | None:
    return (request.client.host, request.client.port) if request.client else None


async def open_run(request: Request) -> tuple[Pipeline, ResponseRun]:
    """What every request that runs the model opens with (a create, a compaction): the design
    it asks for, its connection (new, or kept alive), the uplink and the key check."""
    pipeline = pipeline_of(request)
    door = Door(client=address_of(request), authorization=request.headers.get("authorization"))
    design = requested_design(request.headers.get(DESIGN_HEADER), request.app.state.http_design)
    await pipeline.connect(door)
    await pipeline.uplink(door.trace)
    await pipeline.authenticate(door)
    return pipeline, ResponseRun(design=design, owner=door.owner, trace=door.trace)


# Every endpoint refuses by raising an ``APIError``: the app's one handler answers with it.


async def create_response(request: Request) -> Response:
    """``POST /v1/responses``: the pipeline up to inference, then JSON or an SSE stream."""
    pipeline, run = await open_run(request)
    body = await read_json(request)
    try:
        await unless_gone(request, prepare(pipeline, run, body))
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    assert run.req is not None
    if run.req.stream:
        limit = config_of(request.app).limits.max_unread_bytes
        return StreamingResponse(
            sse_stream(pipeline, run, limit, address_of(request)),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
    try:
        await unless_gone(request, respond(pipeline, run, emit=_discard))
    except ClientGone:  # nobody reads the answer: the response was cancelled, its slot freed
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    except StreamFailed as failed:  # the response's own error is the answer
        raise failed.error from None
    except Exception as exc:  # a failure inside the response: a 500 in the API's shape, as over SSE
        raise as_api_error(exc) from None
    return JSONResponse(run.response)


async def _discard(event: Event) -> None:
    return None


async def sse_stream(
    pipeline: Pipeline,
    run: ResponseRun,
    limit: int = limits.MAX_UNREAD_BYTES,
    client: tuple[str, int] | None = None,
) -> AsyncIterator[bytes]:
    """Run the response in a task and frame its events as they come; a disconnect cancels it.

    The response never waits for the client: its frames go into an ``Outbox`` that this body
    drains. A client that leaves more than ``limit`` bytes unread has the response cut (failed,
    its reason in the trace) and the stream ends with a ``client_too_slow`` error; if the client
    has not taken everything sent within ``LAST_FRAME_GRACE_S``, its connection is dropped.

    A failure after ``response.created`` ends the stream with ``response.failed`` (``respond``
    sends it), one before it (or an event that cannot be framed, in its place) with an error
    event numbered after the last event the response produced (queued, not only sent), so the body
    is never cut short without a last, well-formed frame. A cut ends it with ``response.failed``
    too: the Response, failed with ``client_too_slow``.
    """
    produced = -1  # the sequence number of the last event the response emitted

    def overflowed(slow: SlowReader) -> None:
        transport = transport_of(client)  # now: once closed, its address may be another's
        asyncio.get_running_loop().call_later(LAST_FRAME_GRACE_S, drop_if_stuck, transport)

    outbox: Outbox[bytes] = Outbox(limit, on_overflow=overflowed)

    async def emit(event: Event) -> None:
        nonlocal produced
        outbox.put(frame(event))  # a ValueError (not JSON: NaN) if it cannot be framed
        produced = event["sequence_number"]

    async def stream() -> None:
        try:
            await respond(pipeline, run, emit)
        except SlowReader as slow:
            cut(pipeline, run, slow.reason)
        except StreamFailed:
            pass  # its response.failed is the last frame
        except Exception as exc:
            with contextlib.suppress(SlowReader):
                outbox.put(frame(as_api_error(exc).sse_event(produced + 1)))
        finally:
            outbox.end()

    task = asyncio.create_task(stream())
    try:
        try:
            async for data in outbox:
                yield data
        except SlowReader as slow:
            if run.response.get("status") != "failed":  # ``cut`` marks it, in the response's task
                message = f"The client read too slowly: {slow.reason}. The response was cut."
                run.response.update(status="failed", error={"code": CLIENT_TOO_SLOW, "message": message})
            yield frame(failed_event(run.response, produced + 1))
    finally:
        if not task.done():
            task.cancel()


async def retrieve_response(request: Request) -> Response:
    found = await pipeline_of(request).store.get(owner_of(request), request.path_params["response_id"])
    if found is None:
        raise response_not_found(request.path_params["response_id"])
    return JSONResponse(found)


async def delete_response(request: Request) -> Response:
    response_id = request.path_params["response_id"]
    if not await pipeline_of(request).store.delete(owner_of(request), response_id):
        raise response_not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


def _limit(raw: str | None) -> int:
    try:
        limit = int(raw) if raw is not None else 20
    except ValueError:
        raise invalid_request("Invalid 'limit': expected an integer.", param="limit") from None
    if not 1 <= limit <= 100:
        raise invalid_request("Invalid 'limit': must be between 1 and 100.", param="limit")
    return limit


async def list_input_items(request: Request) -> Response:
    """``{object: "list", data, first_id, last_id, has_more}``, newest first unless ``order=asc``."""
    response_id = request.path_params["response_id"]
    params = request.query_params
    pipeline, owner = pipeline_of(request), owner_of(request)
    if await pipeline.store.get(owner, response_id) is None:
        raise response_not_found(response_id)
    limit = _limit(params.get("limit"))
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid_request("Invalid 'order': expected 'asc' or 'desc'.", param="order")
    items = await pipeline.store.items(response_id, "input")
    if order == "desc":
        items.reverse()
    after = params.get("after")
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise invalid_request(f"Item with id '{after}' not found.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0].get("id") if page else None,
            "last_id": page[-1].get("id") if page else None,
            "has_more": len(items) > limit,
        }
    )


async def get_traces(request: Request) -> Response:
    """labkit extension: the server's spans for one response."""
    response_id = request.query_params.get("response_id")
    if not response_id:
        raise invalid_request("Missing required parameter: 'response_id'.", param="response_id")
    trace = pipeline_of(request).traces.get(owner_of(request), response_id)
    if trace is None:
        raise response_not_found(response_id)
    spans = [span.to_json() for span in trace.spans]
    return JSONResponse({"object": "list", "response_id": response_id, "data": spans})


async def list_models(request: Request) -> Response:
    owner_of(request)  # a server that requires keys requires them here too
    catalogue = pipeline_of(request).catalogue
    data = [{"id": name, "object": "model", "created": 0, "owned_by": "labkit"} for name in catalogue.names()]
    return JSONResponse({"object": "list", "data": data})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def compact_endpoint(request: Request) -> Response:
    """``POST /v1/responses/compact``: the compact resource as JSON (no streaming)."""
    pipeline, run = await open_run(request)
    body = await read_json(request)
    try:
        return JSONResponse(await unless_gone(request, compact(pipeline, run, body)))
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
