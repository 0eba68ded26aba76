"""WebSocket mode on ``/v1/responses``: one socket, many responses, a connection-scoped cache.

Each ``response.create`` frame runs through the same turn as HTTP, but a lane
of the connection remembers its most recent response as a ``Conversation``.
A follow-up that names it in ``previous_response_id`` sends only its new
items: the history, its rendered tokens and the model routing come from
memory, so the service works on the new input alone.

With the ``appended`` design (labkit extension), one ``response.create``
starts a whole rollout as one response: it pauses with ``response.done`` at
each function call and resumes on the client's ``response.append``.

Lanes: a ``stream_id`` names a lane; responses on one lane run in order,
lanes run concurrently. Without ``stream_id`` every create goes to the
default lane, which makes the connection strictly sequential: a create that
arrives while one is running waits its turn.

A connection holds a bounded amount for its client: at most ``MAX_LANES`` lanes,
``MAX_IN_FLIGHT`` responses running, and ``max_queued`` creates (and
``max_queued_bytes`` of their frames) waiting; a create past those is answered with
an error event (``websocket_queue_full``), never held. Whatever a frame holds, the
worst it gets is an error event: the socket stays open and every lane keeps serving.

Events go out through the connection's ``Outbox``: a response queues them and goes on
decoding, and one writer task hands them to the socket, the only task that waits for a
client that reads slowly. So a client that stops reading holds its own events, never an
engine slot. Past ``max_unread_bytes`` unread (``labkit serve --max-unread-bytes``) its
responses are cut (failed, not stored, the reason in their traces) and the connection
closes with 1008 ``client too slow: N bytes unread``; if the client has not answered the close
within ``CLOSE_GRACE_S`` (it waits behind what the client has not read), the connection is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from labkit import limits
from labkit.api import safejson
from labkit.api.errors import APIError, as_api_error, invalid_request, rate_limited, server_error
from labkit.api.events import Event
from labkit.api.extensions import DESIGN_HEADER, DESIGN_QUERY
from labkit.api.requests import parse_item
from labkit.api.sse import encode_event
from labkit.designs import Design, select_design
from labkit.engine.inference import Replica
from labkit.server.appended import respond_appended
from labkit.server.auth import KeyLimiter
from labkit.server.network import drop_if_stuck, transport_of
from labkit.server.outbox import Outbox, SlowReader
from labkit.server.pipeline import Pipeline
from labkit.server.responder import cut, prepare, respond
from labkit.server.traces import Span, Trace
from labkit.server.turn import Conversation, Turn

STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
MAX_LANES = 32
MAX_IN_FLIGHT = 16
DEFAULT_LIFETIME_S = 60 * 60
DEFAULT_MAX_QUEUED = limits.MAX_QUEUED_CREATES  # ``labkit serve --max-queued-creates``
DEFAULT_MAX_QUEUED_BYTES = limits.MAX_QUEUED_BYTES
DEFAULT_MAX_UNREAD_BYTES = limits.MAX_UNREAD_BYTES  # ``labkit serve --max-unread-bytes``
TOO_SLOW = 1008  # the close code for a client that left too much unread (policy violation)
CLOSE_GRACE_S = 2.0  # how long a close frame may wait for the client before the connection drops


def check_stream_id(stream_id: Any) -> None:
    """Refuse a ``stream_id`` that is not a lane's name (``None`` is the default lane)."""
    if stream_id is not None and not (isinstance(stream_id, str) and STREAM_ID.fullmatch(stream_id)):
        raise invalid_request(
            "Invalid 'stream_id': use 1 to 256 characters from A-Z, a-z, 0-9, '_', '.', '-'.",
            param="stream_id",
            code="invalid_stream_id",
        )


@dataclass
class Lane:
    stream_id: str | None
    # Each create: its body, its frame's size, and whether it waits behind another on this lane.
    queue: asyncio.Queue[tuple[dict[str, Any], int, bool]] = field(default_factory=asyncio.Queue)
    busy: bool = False  # a response of this lane is running (or waiting for a slot)
    appends: asyncio.Queue[list[Any]] = field(default_factory=asyncio.Queue)
    in_rollout: bool = False  # an appended rollout is running and takes response.append
    rollout_id: str | None = None  # ... the id of that rollout's response
    cache: Conversation | None = None
    worker: asyncio.Task[None] | None = None


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
        max_queued: int = DEFAULT_MAX_QUEUED,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        max_unread_bytes: int = DEFAULT_MAX_UNREAD_BYTES,
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
        self.outbox: Outbox[str] = Outbox(max_unread_bytes, on_overflow=self._cut)
        self.slow: SlowReader | None = None  # set once the client left too much unread
        self.writer: asyncio.Task[None] | None = None
        self.closer: asyncio.Task[None] | None = None
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self.queued = 0  # creates waiting behind another on their lane
        self.queued_bytes = 0  # the frames of every create not started yet
        self.limits = limits or KeyLimiter()

    async def run(self) -> None:
        expiry = asyncio.create_task(self._expire())
        writer = self.writer = asyncio.create_task(self._write())
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
            writer.cancel()
            for lane in self.lanes.values():
                if lane.worker is not None:
                    lane.worker.cancel()
            if self.closer is not None:  # done by now, or within its grace
                with contextlib.suppress(Exception):
                    await self.closer

    async def _expire(self) -> None:
        await asyncio.sleep(self.lifetime_s)
        limit = f"{self.lifetime_s / 60:g}-minute" if self.lifetime_s >= 60 else f"{self.lifetime_s:g}-second"
        err = invalid_request(
            f"This WebSocket connection reached its {limit} limit. Open a new connection.",
            code="websocket_connection_limit_reached",
        )
        with contextlib.suppress(SlowReader):  # a connection being cut closes anyway
            await self.send(err.ws_event())
            self.outbox.end()  # the writer closes (1000) after this last event

    async def send(self, event: Event, stream_id: str | None = None) -> None:
        """Queue an event for the writer, without waiting for the socket (``SlowReader`` past
        the bound). Never suspends: every delta comes this way."""
        if stream_id is not None:
            event = {**event, "stream_id": stream_id}
        self.outbox.put(encode_event(event))

    async def _write(self) -> None:
        """The one task that waits for the client: the outbox's events to the socket, in order."""
        try:
            async for text in self.outbox:
                await self.ws.send_text(text)
        except SlowReader:
            return  # the cut closes the connection (``_cut``)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.outbox.end()  # the client has gone (``run`` sees it): nothing more is queued
            return
        await close(self.ws, 1000)  # ended: the connection's lifetime is over

    def _cut(self, slow: SlowReader) -> None:
        """Past the bound: every response of the connection ends now, its engine slot freed, and
        the connection closes with the reason (the outbox has dropped the unread events)."""
        self.slow = slow
        for lane in self.lanes.values():
            if lane.worker is not None:
                lane.worker.cancel()  # each records its cut (``_respond``)
        if self.writer is not None:
            self.writer.cancel()  # it may be waiting for the socket, which the client does not read
        self.closer = asyncio.create_task(close(self.ws, TOO_SLOW, slow.reason, cut=True))

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
            if kind == "response.create":
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
            elif kind == "response.append" and self.design.appended:
                await self.append(payload)
            else:
                raise invalid_request(f"Unsupported event type '{kind}'.", param="type", code="unknown_event")
        except APIError as err:
            await self.send(err.ws_event())

    async def append(self, payload: dict[str, Any]) -> None:
        """labkit extension: tool results for the appended rollout paused on this lane."""
        stream_id = payload.get("stream_id")
        check_stream_id(stream_id)  # a lane key: a list or an object would not even hash
        lane = self.lanes.get(stream_id)
        if lane is None or not lane.in_rollout:
            raise invalid_request("No response on this connection is waiting for response.append.")
        if payload.get("response_id") != lane.rollout_id:
            raise invalid_request(
                f"Response '{payload.get('response_id')}' is not waiting for response.append on this "
                f"stream; '{lane.rollout_id}' is.",
                param="response_id",
            )
        items = payload.get("input")
        if not isinstance(items, list):
            raise invalid_request("'input' of response.append must be a list of items.", param="input")
        for i, item in enumerate(items):
            parse_item(item, f"input[{i}]")  # refuse bad items now; the rollout keeps waiting
        if lane.appends.qsize() >= self.max_queued:  # appends sent ahead are kept, up to a point
            raise rate_limited(
                f"Too many appends waiting on this stream (at most {self.max_queued}).",
                code="websocket_queue_full",
            )
        lane.appends.put_nowait(items)

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
        try:
            hold = self.limits.request(self.owner)
            hold.__enter__()
        except APIError as err:  # past the key's cap: refused before it starts, the cache kept
            await self.send(err.ws_event(), lane.stream_id)
            return
        try:
            await self._respond(lane, body)
        finally:
            hold.__exit__(None, None, None)

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
        design = select_design(ws.headers.get(DESIGN_HEADER) or query, state.ws_design)
        hold = limits.connection(owner)
        hold.__enter__()  # past the key's cap of open connections: a 429
    except APIError as err:
        await deny(ws, err)
        return
    try:
        await ws.accept()
        session = WebSocketSession(
            ws,
            pipeline,
            owner,
            design,
            state.ws_lifetime_s,
            trace.spans,
            max_queued=getattr(state, "max_queued_creates", DEFAULT_MAX_QUEUED),
            max_queued_bytes=getattr(state, "max_queued_bytes", DEFAULT_MAX_QUEUED_BYTES),
            max_unread_bytes=getattr(state, "max_unread_bytes", DEFAULT_MAX_UNREAD_BYTES),
            limits=limits,
        )
        try:
            await session.run()
        except Exception:  # never drop the TCP connection without a close frame
            await close(ws, 1011)
    finally:
        hold.__exit__(None, None, None)


async def close(ws: WebSocket, code: int, reason: str = "", *, cut: bool = False) -> None:
    """Close with ``code``; if the close frame cannot go out within ``CLOSE_GRACE_S`` (it waits
    behind what the client has not read), drop the connection instead. A ``cut`` connection is
    also dropped if, that long after its close frame, the client has not answered it."""
    transport = transport_of((ws.client.host, ws.client.port) if ws.client else None)
    try:
        await asyncio.wait_for(ws.close(code=code, reason=reason), CLOSE_GRACE_S)
    except TimeoutError:
        drop_if_stuck(transport)
        return
    except Exception:  # closed already, or gone
        return
    if cut:  # a client too slow to read may never take the close frame it was given
        await asyncio.sleep(CLOSE_GRACE_S)
        drop_if_stuck(transport, closing=True)
