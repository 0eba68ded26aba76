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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from labkit.api.errors import APIError, as_api_error, invalid_request
from labkit.api.events import Event
from labkit.api.extensions import DESIGN_HEADER, DESIGN_QUERY
from labkit.api.requests import parse_item
from labkit.api.sse import encode_event
from labkit.designs import Design, select_design
from labkit.engine.inference import Replica
from labkit.server.appended import respond_appended
from labkit.server.pipeline import Pipeline
from labkit.server.responder import prepare, respond
from labkit.server.traces import Span, Trace
from labkit.server.turn import Conversation, Turn

STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
MAX_LANES = 32
MAX_IN_FLIGHT = 16
DEFAULT_LIFETIME_S = 60 * 60


@dataclass
class Lane:
    stream_id: str | None
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
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
    ) -> None:
        self.ws = ws
        self.pipeline = pipeline
        self.owner = owner
        self.design = design
        self.lifetime_s = lifetime_s
        self.setup = list(setup or [])  # connection set-up spans, reported with the first response
        self.replica: Replica | None = None  # the connection is pinned to one replica
        self.lanes: dict[str | None, Lane] = {}
        self._send_lock = asyncio.Lock()
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def run(self) -> None:
        expiry = asyncio.create_task(self._expire())
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None and message.get("bytes") is not None:
                    text = message["bytes"].decode("utf-8", errors="replace")
                await self.dispatch(text or "")
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            expiry.cancel()
            for lane in self.lanes.values():
                if lane.worker is not None:
                    lane.worker.cancel()

    async def _expire(self) -> None:
        await asyncio.sleep(self.lifetime_s)
        limit = f"{self.lifetime_s / 60:g}-minute" if self.lifetime_s >= 60 else f"{self.lifetime_s:g}-second"
        err = invalid_request(
            f"This WebSocket connection reached its {limit} limit. Open a new connection.",
            code="websocket_connection_limit_reached",
        )
        await self.send(err.ws_event())
        with contextlib.suppress(RuntimeError):
            await self.ws.close(code=1000)

    async def send(self, event: Event, stream_id: str | None = None) -> None:
        if stream_id is not None:
            event = {**event, "stream_id": stream_id}
        async with self._send_lock:
            if self.ws.application_state == WebSocketState.CONNECTED:
                await self.ws.send_text(encode_event(event))

    async def dispatch(self, text: str) -> None:
        """Route one client frame; a bad frame gets an error event, never a closed socket."""
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as exc:
            err = invalid_request(f"Invalid JSON in WebSocket frame: {exc}.", code="invalid_json")
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
                body = {k: v for k, v in payload.items() if k not in ("type", "stream_id", "stream")}
                await lane.queue.put(body)
            elif kind == "response.append" and self.design.appended:
                await self.append(payload)
            else:
                raise invalid_request(f"Unsupported event type '{kind}'.", param="type", code="unknown_event")
        except APIError as err:
            await self.send(err.ws_event())

    async def append(self, payload: dict[str, Any]) -> None:
        """labkit extension: tool results for the appended rollout paused on this lane."""
        lane = self.lanes.get(payload.get("stream_id"))
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
        await lane.appends.put(items)

    def lane(self, stream_id: Any) -> Lane:
        if stream_id is not None and not (isinstance(stream_id, str) and STREAM_ID.fullmatch(stream_id)):
            raise invalid_request(
                "Invalid 'stream_id': use 1 to 256 characters from A-Z, a-z, 0-9, '_', '.', '-'.",
                param="stream_id",
                code="invalid_stream_id",
            )
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
            body = await lane.queue.get()
            async with self._in_flight:
                await self.respond(lane, body)

    async def respond(self, lane: Lane, body: dict[str, Any]) -> None:
        """Run one response on a lane, using and then replacing the lane's cached conversation."""
        previous = body.get("previous_response_id")

        async def emit(event: Event) -> None:
            await self.send(event, lane.stream_id)

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
        except (WebSocketDisconnect, asyncio.CancelledError):
            raise
        except Exception as exc:
            if lane.cache is not None and lane.cache.response["id"] == previous:
                lane.cache = None  # a failed turn evicts what it referenced
            await self.send(as_api_error(exc).ws_event(), lane.stream_id)
        finally:
            lane.in_rollout, lane.rollout_id = False, None
            while not lane.appends.empty():
                lane.appends.get_nowait()


async def websocket_endpoint(ws: WebSocket) -> None:
    """The upgrade: a new connection (handshakes), one auth check, then the session."""
    state = ws.app.state
    pipeline: Pipeline = state.pipeline
    trace = Trace()
    await pipeline.connect(trace, None, new=True)
    await pipeline.upgrade(trace)
    try:
        owner = await pipeline.authenticate(trace, ws.headers.get("authorization"))
        # A query string decodes "+" as a space, and a design spec has no spaces: read them back.
        query = (ws.query_params.get(DESIGN_QUERY) or "").replace(" ", "+")
        design = select_design(ws.headers.get(DESIGN_HEADER) or query, state.ws_design)
    except APIError:
        await ws.close(code=1008)  # refused before the upgrade completes: HTTP 403
        return
    await ws.accept()
    await WebSocketSession(ws, pipeline, owner, design, state.ws_lifetime_s, trace.spans).run()
