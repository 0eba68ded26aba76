"""WebSocket mode on ``/v1/responses``: one socket, many responses, a connection-scoped cache.

Each ``response.create`` frame runs through the same turn as HTTP, but a lane
of the connection remembers its most recent response as a ``Conversation``.
A follow-up that names it in ``previous_response_id`` sends only its new
items: the history, its rendered tokens and the model routing come from
memory, so the service works on the new input alone.

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

from labkit.api.errors import APIError, invalid_request
from labkit.api.events import Event
from labkit.api.requests import parse_create
from labkit.api.sse import encode_event
from labkit.server.turns import Conversation, Service, failure

STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
MAX_LANES = 32
MAX_IN_FLIGHT = 16
DEFAULT_LIFETIME_S = 60 * 60


@dataclass
class Lane:
    stream_id: str | None
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    cache: Conversation | None = None
    worker: asyncio.Task[None] | None = None


class WebSocketSession:
    def __init__(self, ws: WebSocket, service: Service, owner: str, lifetime_s: float) -> None:
        self.ws = ws
        self.service = service
        self.owner = owner
        self.lifetime_s = lifetime_s
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
            await self.send(invalid_request(f"Invalid JSON in WebSocket frame: {exc}.").ws_event())
            return
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            err = invalid_request("A WebSocket frame must be a JSON object with a 'type'.", param="type")
            await self.send(err.ws_event())
            return
        kind = payload["type"]
        if kind != "response.create":
            err = invalid_request(f"Unsupported event type '{kind}'.", param="type", code="unknown_event")
            await self.send(err.ws_event())
            return
        try:
            lane = self.lane(payload.get("stream_id"))
        except APIError as err:
            await self.send(err.ws_event())
            return
        body = {k: v for k, v in payload.items() if k not in ("type", "stream_id", "stream")}
        await lane.queue.put(body)

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

        try:
            req = parse_create(body)
            if req.background:
                raise invalid_request("background is not supported in WebSocket mode.", param="background")
            hit = lane.cache if lane.cache and lane.cache.response["id"] == previous else None
            turn = self.service.prepare(req, self.owner, hit)
            lane.cache = await self.service.execute(turn, emit)
        except (WebSocketDisconnect, asyncio.CancelledError):
            raise
        except Exception as exc:
            if lane.cache is not None and lane.cache.response["id"] == previous:
                lane.cache = None  # a failed turn evicts what it referenced
            await self.send(failure(exc).ws_event(), lane.stream_id)


async def websocket_endpoint(ws: WebSocket) -> None:
    state = ws.app.state
    try:
        owner = state.keys.owner(ws.headers.get("authorization"))
    except APIError:
        await ws.close(code=1008)  # refused before the upgrade completes: HTTP 403
        return
    await ws.accept()
    await WebSocketSession(ws, state.service, owner, state.ws_lifetime_s).run()
