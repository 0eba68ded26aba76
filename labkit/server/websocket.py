"""WebSocket mode on ``/v1/responses``, in one module: the frame reader, the lanes' workers and the
upgrade share one connection's bounds, held slots and cached conversations, so they are read together.

One socket, many responses, a connection-scoped cache. Each ``response.create`` frame runs
through the same turn as HTTP, but a lane of the connection remembers its most recent
response as a ``Conversation``. A follow-up that names it in ``previous_response_id`` sends
only its new items: the history, its rendered tokens and the model routing come from
memory, so the service works on the new input alone.

With the ``appended`` design (labkit extension), one ``response.create``
starts a whole rollout as one response: it pauses with ``response.done`` at
each function call and resumes on the client's ``response.append``.

Lanes (``labkit.server.lanes``): a ``stream_id`` names a lane; responses on one lane run
in order, lanes run concurrently. A connection holds a bounded amount for its client: at
most ``limits.MAX_LANES`` lanes, ``limits.MAX_IN_FLIGHT`` responses running, and ``max_queued``
creates (and ``max_queued_bytes`` of their frames) waiting; a create past those is
answered with an error event (``websocket_queue_full``), never held. Whatever a frame
holds, the worst it gets is an error event: the socket stays open and every lane keeps
serving. Events leave through one writer, which cuts a client that reads too slowly
(``labkit.server.ws_writer``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from labkit.api import safejson
from labkit.api.errors import APIError, as_api_error, invalid_request, rate_limited, server_error
from labkit.api.event_types import RESPONSE_APPEND, RESPONSE_CREATE
from labkit.api.events import Event
from labkit.api.extensions import DESIGN_HEADER, DESIGN_QUERY
from labkit.designs import Design
from labkit.engine.inference import Replica
from labkit.limits import MAX_IN_FLIGHT, MAX_LANES, MAX_QUEUED_BYTES, MAX_QUEUED_CREATES, MAX_UNREAD_BYTES
from labkit.server.appended import respond_appended
from labkit.server.auth import KeyLimiter
from labkit.server.lanes import Lane, check_stream_id, queue_append
from labkit.server.outbox import SlowReader
from labkit.server.pipeline import Pipeline
from labkit.server.requested_design import requested_design
from labkit.server.responder import cut, prepare, respond
from labkit.server.traces import Span, Trace
from labkit.server.turn import Turn
from labkit.server.ws_writer import ConnectionWriter, close


class WebSocketSession:
    def __init__(
        self,
        ws: WebSocket,
        pipeline: Pipeline,
        owner: str,
        design: Design,
        lifetime_s: float,
        setup: list[Span] | None = None,
        *,
        max_queued: int = MAX_QUEUED_CREATES,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        max_unread_bytes: int = MAX_UNREAD_BYTES,
        limits: KeyLimiter | None = None,
    ) -> None:
        self.ws = ws
        self.pipeline = pipeline
        self.owner = owner
        self.design = design
        self.lifetime_s = lifetime_s
        self.setup = list(setup or [])  # connection set-up spans, reported with the first response
        self.replica: Replica | None = None  # the connection is pinned to one replica
        self.lanes: dict[str | None, Lane] = {}
        self.writer = ConnectionWriter(ws, max_unread_bytes, on_cut=self._cut)
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self.queued = 0  # creates waiting behind another on their lane
        self.queued_bytes = 0  # the frames of every create not started yet
        self.limits = limits or KeyLimiter()

    @property
    def slow(self) -> SlowReader | None:
        """Set once the client left too much unread: the connection is being cut."""
        return self.writer.slow

    async def run(self) -> None:
        expiry = asyncio.create_task(self._expire())
        self.writer.start()
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                frame = message.get("text")
                if frame is None:
                    frame = message.get("bytes") or b""  # decoded (strictly) by safejson.loads
                try:
                    await self.dispatch(frame)
                except WebSocketDisconnect:
                    raise
                except SlowReader:
                    continue  # being cut: read on until the connection ends
                except Exception:
                    if self.ws.application_state != WebSocketState.CONNECTED:
                        raise
                    # A bug, not the client's: answer the frame and keep the socket open.
                    with contextlib.suppress(SlowReader):
                        await self.send(server_error().ws_event())
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            expiry.cancel()
            self.writer.cancel()
            for lane in self.lanes.values():
                if lane.worker is not None:
                    lane.worker.cancel()
            await self.writer.closed()

    async def _expire(self) -> None:
        await asyncio.sleep(self.lifetime_s)
        limit = f"{self.lifetime_s / 60:g}-minute" if self.lifetime_s >= 60 else f"{self.lifetime_s:g}-second"
        err = invalid_request(
            f"This WebSocket connection reached its {limit} limit. Open a new connection.",
            code="websocket_connection_limit_reached",
        )
        with contextlib.suppress(SlowReader):  # a connection being cut closes anyway
            await self.send(err.ws_event())
            self.writer.end()  # the writer closes (1000) after this last event

    async def send(self, event: Event, stream_id: str | None = None) -> None:
        """Queue an event for the writer, without waiting for the socket (``SlowReader`` past
        the bound). Never suspends: every delta comes this way."""
        self.writer.put(event, stream_id)

    def _cut(self, slow: SlowReader) -> None:
        """The client left too much unread: every response of the connection ends now, its
        engine slot freed (the writer then closes the connection with the reason)."""
        for lane in self.lanes.values():
            if lane.worker is not None:
                lane.worker.cancel()  # each records its cut (``_respond``)

    async def dispatch(self, frame: str | bytes) -> None:
        """Route one client frame; a bad frame gets an error event, never a closed socket."""
        if self.slow is not None:
            return  # the connection is being cut: nothing new starts
        try:
            payload = safejson.loads(frame, what="the WebSocket frame")
        except APIError as err:
            err.code = err.code or "invalid_json"
            await self.send(err.ws_event())
            return
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            err = invalid_request(
                "A WebSocket frame must be a JSON object with a 'type'.", param="type", code="invalid_value"
            )
            await self.send(err.ws_event())
            return
        kind = payload["type"]
        try:
            if kind == RESPONSE_CREATE:
                lane = self.lane(payload.get("stream_id"))
                size = len(frame)
                behind = lane.busy or not lane.queue.empty()  # an idle lane starts it at once
                if (behind and self.queued >= self.max_queued) or (
                    self.queued_bytes + size > self.max_queued_bytes
                ):
                    full = rate_limited(
                        f"Too many responses waiting on this connection (at most {self.max_queued}, "
                        f"{self.max_queued_bytes} bytes). Wait for one to finish, or use another stream.",
                        code="websocket_queue_full",
                    )
                    await self.send(full.ws_event(), lane.stream_id)  # the lane's: it names the create
                    return
                body = {k: v for k, v in payload.items() if k not in ("type", "stream_id", "stream")}
                self.queued, self.queued_bytes = self.queued + behind, self.queued_bytes + size
                lane.queue.put_nowait((body, size, behind))
            elif kind == RESPONSE_APPEND and self.design.appended:
                queue_append(self.lanes, payload, self.max_queued)
            else:
                raise invalid_request(f"Unsupported event type '{kind}'.", param="type", code="unknown_event")
        except APIError as err:
            await self.send(err.ws_event())

    def lane(self, stream_id: Any) -> Lane:
        check_stream_id(stream_id)
        lane = self.lanes.get(stream_id)
        if lane is None:
            named = sum(1 for key in self.lanes if key is not None)
            if stream_id is not None and named >= MAX_LANES:
                raise invalid_request(
                    f"This connection already has {MAX_LANES} streams.",
                    param="stream_id",
                    code="websocket_stream_limit_reached",
                )
            lane = self.lanes[stream_id] = Lane(stream_id)
            lane.worker = asyncio.create_task(self._work(lane))
        return lane

    async def _work(self, lane: Lane) -> None:
        while True:
            body, size, behind = await lane.queue.get()
            lane.busy, self.queued = True, self.queued - behind
            try:
                async with self._in_flight:
                    self.queued_bytes -= size
                    size = 0
                    await self.respond(lane, body)
            except (WebSocketDisconnect, asyncio.CancelledError):
                raise
            except SlowReader:
                return  # the connection is being cut: so is this lane
            except Exception:  # the lane must outlive any one response, or it is stuck for good
                with contextlib.suppress(Exception):
                    await self.send(server_error().ws_event(), lane.stream_id)
            finally:
                self.queued_bytes -= size
                lane.busy = False

    async def respond(self, lane: Lane, body: dict[str, Any]) -> None:
        """Run one response on a lane, using and then replacing the lane's cached conversation."""
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.limits.request(self.owner))
            except APIError as err:  # past the key's cap: refused before it starts, the cache kept
                await self.send(err.ws_event(), lane.stream_id)
                return
            await self._respond(lane, body)

    async def _respond(self, lane: Lane, body: dict[str, Any]) -> None:
        previous = body.get("previous_response_id")

        emit = functools.partial(self.send, stream_id=lane.stream_id)  # no frame of its own per event
        turn = Turn(design=self.design, owner=self.owner, cached=lane.cache, pinned=self.replica)
        turn.trace.spans.extend(self.setup)
        self.setup = []
        try:
            if body.get("background"):
                raise invalid_request(
                    "background is not supported in WebSocket mode.",
                    param="background",
                    code="unsupported_value",
                )
            await self.pipeline.uplink(turn.trace)
            await prepare(self.pipeline, turn, body)
            # The lane's connection cache is replaced only here, by a finished response (its
            # rendering's rules: labkit.server.render_cache).
            if self.design.appended:
                lane.in_rollout, lane.rollout_id = True, turn.response["id"]
                lane.cache = await respond_appended(self.pipeline, turn, emit, lane.appends.get)
            else:
                lane.cache = await respond(self.pipeline, turn, emit)
            self.replica = lane.cache.replica
        except (WebSocketDisconnect, asyncio.CancelledError, SlowReader):
            if self.slow is not None:
                cut(self.pipeline, turn, self.slow.reason)
            raise
        except Exception as exc:
            if lane.cache is not None and lane.cache.response["id"] == previous:
                lane.cache = None  # a failed turn evicts what it referenced
            await self.send(as_api_error(exc).ws_event(), lane.stream_id)
        finally:
            lane.in_rollout, lane.rollout_id = False, None
            while not lane.appends.empty():
                lane.appends.get_nowait()


async def deny(ws: WebSocket, err: APIError) -> None:
    """Refuse an upgrade with an HTTP answer in the API's error shape (401, 400, 429).

    Sent before the handshake completes (the ASGI ``websocket.http.response`` extension,
    which uvicorn supports), so a client's handshake fails with that status and body. A
    server without the extension can only close: the client then sees a bare 403.
    """
    try:
        await ws.send_denial_response(JSONResponse(err.body(), status_code=err.status))
    except RuntimeError:
        await ws.close(code=1008)


async def websocket_endpoint(ws: WebSocket) -> None:
    """The upgrade: a new connection (handshakes), one auth check, then the session."""
    state = ws.app.state
    pipeline: Pipeline = state.pipeline
    limits: KeyLimiter = getattr(state, "limits", None) or KeyLimiter()
    trace = Trace()
    await pipeline.connect(trace, None, new=True)
    await pipeline.upgrade(trace)
    try:
        owner = await pipeline.authenticate(trace, ws.headers.get("authorization"))
        # A query string decodes "+" as a space, and a design spec has no spaces: read them back.
        query = (ws.query_params.get(DESIGN_QUERY) or "").replace(" ", "+")
        design = requested_design(ws.headers.get(DESIGN_HEADER) or query, state.ws_design)
    except APIError as err:
        await deny(ws, err)
        return
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(limits.connection(owner))  # past the key's cap of open connections: a 429
        except APIError as err:
            await deny(ws, err)
            return
        await ws.accept()
        session = WebSocketSession(
            ws,
            pipeline,
            owner,
            design,
            state.ws_lifetime_s,
            trace.spans,
            max_queued=getattr(state, "max_queued_creates", MAX_QUEUED_CREATES),
            max_queued_bytes=getattr(state, "max_queued_bytes", MAX_QUEUED_BYTES),
            max_unread_bytes=getattr(state, "max_unread_bytes", MAX_UNREAD_BYTES),
            limits=limits,
        )
        try:
            await session.run()
        except Exception:  # never drop the TCP connection without a close frame
            await close(ws, 1011)
