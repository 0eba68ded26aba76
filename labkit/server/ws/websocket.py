"""WebSocket mode on ``/v1/responses``: the asyncio loop around one connection's rules.

The rules live in ``labkit.server.wscore.connection`` (``Connection``), which has no I/O: this module
reads frames and hands them over, carries out what it answers, runs each response through the
pipeline in a task of its own, and reports back when a response is created and when it ends.
What it knows of a response the core runs comes from those answers, never from the core's
``Job`` state:

- ``Start``: a task for the response (``Running``);
- ``Interrupt``: set that response's own stop signal (``ResponseRun.stop``), which the sampler
  reads at its safe boundaries;
- ``InputReady``: wake the appended rollout, which takes the input from the core
  (``Connection.take_input``), the one place it is kept;
- ``Arrive``: a steer crossing the network, the pipeline's ``uplink`` stage as for a create, then
  handed to the core. Accepted onto a running response, that crossing is a span of the
  response's trace, named by the steer's id and marked ``overlapped``: it ran beside the decode
  it interrupts, off the response's critical path, as overlapped billing runs beside the next
  request (a turn's API time is its wall time less inference and the client's,
  ``labkit.analysis.metrics``, so it does not count twice);
- ``Queued``: a steer accepted for a response waiting on its client's calls; its crossing is kept
  for the create that commits it (the ``Start``'s ``job.committing``) and joins that response's
  trace, marked the same way. A refused steer is no response's: its crossing is in no trace.

Around that it owns what only a running connection has: the socket and its writer (which cuts a
client that reads too slowly, ``labkit.server.ws.writer``), the connection's lifetime, the
replica it is pinned to, the per-key cap of requests in flight, and the upgrade.

With the ``appended`` design, one ``response.create`` starts a whole rollout as one response
that waits at each function call for the client's tool outputs: over the official SDK's
multi-agent beta (an upgrade whose ``OpenAI-Beta`` header names it) they come in
``response.inject``; otherwise the response pauses with ``response.done`` and resumes on
``response.append`` (labkit's reconstruction of the prototype's wire).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from labkit.api.errors import APIError, as_api_error, invalid_request, server_error
from labkit.api.events import Event
from labkit.api.extensions import DESIGN_HEADER, DESIGN_QUERY
from labkit.api.inject import BETA_HEADER, MULTI_AGENT_BETA, speaks_inject
from labkit.api.stages import Stage
from labkit.designs import Design
from labkit.engine.inference import Replica
from labkit.limits import MAX_LANES, MAX_PENDING_STEERS, ServerLimits
from labkit.server.config import config_of
from labkit.server.edge.auth import KeyLimiter
from labkit.server.edge.outbox import SlowReader
from labkit.server.requested_design import requested_design
from labkit.server.stages.appended import NextInput, respond_appended
from labkit.server.stages.door import Door
from labkit.server.stages.pipeline import Pipeline
from labkit.server.stages.responder import StreamFailed, cut, prepare, respond
from labkit.server.stages.response_run import ResponseRun
from labkit.server.stores.traces import Span, Trace
from labkit.server.ws.learner_cache import GuardedCache
from labkit.server.ws.writer import ConnectionWriter, close
from labkit.server.wscore.connection import Connection
from labkit.server.wscore.connection_jobs import (
    Action,
    Arrive,
    Failed,
    Finished,
    InputReady,
    Interrupt,
    Job,
    Outcome,
    Queued,
    Send,
    Start,
)
from labkit.server.wscore.held_bytes import HeldBytes

# Steers' crossings kept for the creates that commit them: a full queue on every lane's waiting response.
QUEUED_CROSSINGS = MAX_PENDING_STEERS * (MAX_LANES + 1)


@dataclass(eq=False)
class Running:
    """A response this connection runs: its task, its run once the task has made it (whose stop
    signal an ``Interrupt`` sets, and whose trace a steer's crossing joins), and the wake-up an
    appended rollout waits on for its input (``InputReady``)."""

    task: asyncio.Task[None]
    run: ResponseRun | None = None
    input_ready: asyncio.Event = field(default_factory=asyncio.Event)


class WebSocketSession:
    def __init__(
        self,
        ws: WebSocket,
        pipeline: Pipeline,
        owner: str,
        design: Design,
        limits: ServerLimits,
        key_limiter: KeyLimiter,
        setup: list[Span] | None = None,
        *,
        held_by_key: HeldBytes | None = None,
        inject: bool = False,
        cache_class: type | None = None,
    ) -> None:
        self.ws = ws
        self.pipeline = pipeline
        self.owner = owner
        self.design = design
        self.lifetime_s = limits.ws_lifetime_s
        self.setup = list(setup or [])  # connection set-up spans, reported with the first response
        self.replica: Replica | None = None  # the connection is pinned to one replica
        self.connection = Connection(
            design,
            max_queued=limits.max_queued_creates,
            max_queued_bytes=limits.max_queued_bytes,
            max_echo_bytes=limits.max_echo_bytes,
            held_by_key=held_by_key,
            inject=inject,
            learner_cache=(lambda: GuardedCache(cache_class)) if cache_class is not None else None,
        )
        self.writer = ConnectionWriter(ws, limits.max_unread_bytes, on_cut=self._cut)
        self.key_limiter = key_limiter
        self.running: dict[Job, Running] = {}  # the responses running
        self.arriving: set[asyncio.Task[None]] = set()  # steers crossing the network
        # The crossings of steers that wait for the create committing them (``Queued``), by steer id:
        # as many as the connection holds steers, or fewer (one that is never committed ages out).
        self.queued: LRUCache[str, list[Span]] = LRUCache(maxsize=QUEUED_CROSSINGS)

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
                if self.slow is not None:
                    continue  # being cut: nothing new starts; read on until the connection ends
                try:
                    self.act(self.connection.receive(frame))
                except SlowReader:
                    continue
                except Exception:
                    if self.ws.application_state != WebSocketState.CONNECTED:
                        raise
                    # A bug, not the client's: answer the frame and keep the socket open.
                    with contextlib.suppress(SlowReader):
                        self.send(server_error().ws_event())
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            expiry.cancel()
            self.writer.cancel()
            for running in list(self.running.values()):
                running.task.cancel()
            for crossing in list(self.arriving):
                crossing.cancel()  # the connection has ended: a steer still crossing is dropped
            self.connection.held.release()  # what the client sent and the server held, given back to its key
            await self.writer.closed()

    async def _expire(self) -> None:
        await asyncio.sleep(self.lifetime_s)
        limit = f"{self.lifetime_s / 60:g}-minute" if self.lifetime_s >= 60 else f"{self.lifetime_s:g}-second"
        err = invalid_request(
            f"This WebSocket connection reached its {limit} limit. Open a new connection.",
            code="websocket_connection_limit_reached",
        )
        with contextlib.suppress(SlowReader):  # a connection being cut closes anyway
            self.send(err.ws_event())
            self.writer.end()  # the writer closes (1000) after this last event

    def send(self, event: Event, stream_id: str | None = None) -> None:
        """Queue an event for the writer, without waiting for the socket (``SlowReader`` past the
        bound). Never suspends: every delta comes this way."""
        self.writer.put(event, stream_id)

    async def emit(self, event: Event, stream_id: str | None = None) -> None:
        """``send``, as the pipeline's ``Emit`` (awaited, as HTTP's waits for its socket)."""
        self.send(event, stream_id)

    def act(self, actions: list[Action]) -> None:
        """Carry out what the connection answered, in its order."""
        for action in actions:
            if isinstance(action, Send):
                self.send(action.event)
            elif isinstance(action, Start):
                self.running[action.job] = Running(asyncio.create_task(self._run(action.job)))
            elif isinstance(action, Interrupt):
                run = self._run_of(action.job)
                if run is not None:
                    run.stop.request()
            elif isinstance(action, InputReady):
                running = self.running.get(action.job)
                if running is not None:
                    running.input_ready.set()
            elif isinstance(action, Arrive):
                crossing = asyncio.create_task(self._arrive(action.payload, action.size))
                self.arriving.add(crossing)
                crossing.add_done_callback(self.arriving.discard)

    def _run_of(self, job: Job) -> ResponseRun | None:
        running = self.running.get(job)
        return running.run if running is not None else None

    async def _arrive(self, payload: dict[str, Any], size: int) -> None:
        """A steer crosses the network (the pipeline's uplink stage, as a create's does), then is
        handed to the connection; the crossing joins the trace of the response it interrupts."""
        crossing = Trace()
        await self.pipeline.uplink(crossing)
        if self.slow is not None or self.ws.application_state != WebSocketState.CONNECTED:
            return
        try:
            actions = self.connection.steer(payload, size)
            for action in actions:
                if isinstance(action, Interrupt):
                    self._record_crossing(self._run_of(action.job), action.steer, crossing.spans)
                elif isinstance(action, Queued):
                    self.queued[action.steer] = crossing.spans
            self.act(actions)
        except SlowReader:
            pass
        except Exception:  # a bug, not the client's: answer it, and keep the socket open
            with contextlib.suppress(SlowReader):
                self.send(server_error().ws_event())

    @staticmethod
    def _record_crossing(run: ResponseRun | None, steer: str, spans: list[Span]) -> None:
        """A steer's uplink, in the trace of the response it interrupts or that commits it: named by
        the steer, and ``overlapped`` (it ran beside that response's decode, or before the response
        began, never on its critical path)."""
        if run is None:
            return
        for span in spans:
            span.segment = run.trace.segment
            span.detail.update(steer=steer, overlapped=True)
            run.trace.spans.append(span)

    def _cut(self) -> None:
        """The client left too much unread: every response of the connection ends now, its
        engine slot freed (the writer then closes the connection with the reason)."""
        for running in self.running.values():
            running.task.cancel()  # each records its cut (``_respond``)

    async def _run(self, job: Job) -> None:
        """One response, from start to its outcome, which goes back to the connection."""
        outcome: Outcome = Failed()
        try:
            with contextlib.ExitStack() as held:
                try:
                    held.enter_context(self.key_limiter.request(self.owner))
                except APIError as err:  # past the key's cap: refused before it starts, the cache kept
                    self.send(err.ws_event(job.stream_id))
                    outcome = Failed(evict=False)
                else:
                    outcome = await self._respond(job)
        except (WebSocketDisconnect, asyncio.CancelledError, SlowReader):
            self.running.pop(job, None)
            return  # the connection is over (or being cut): nothing follows this response
        except Exception:  # a lane must outlive any one response, or it is stuck for good
            with contextlib.suppress(Exception):
                self.send(server_error().ws_event(job.stream_id))
        self.running.pop(job, None)
        with contextlib.suppress(SlowReader):
            self.act(self.connection.finished(job, outcome))

    async def _respond(self, job: Job) -> Outcome:
        emit = functools.partial(self.emit, stream_id=job.stream_id)  # no frame of its own per event
        turn = ResponseRun(design=self.design, owner=self.owner, parent=job.parent, pinned=self.replica)
        self.running[job].run = turn  # before it is created: from then on a steer may interrupt it
        turn.trace.spans.extend(self.setup)
        self.setup = []
        for steer in job.committing:  # steers that waited for this create: their crossings
            self._record_crossing(turn, steer.id, self.queued.pop(steer.id, []))
        try:
            if job.body.get("background"):
                raise invalid_request(
                    "background is not supported in WebSocket mode.",
                    param="background",
                    code="unsupported_value",
                )
            if not job.automatic:  # a steered response's successor is the server's own: no request
                await self.pipeline.uplink(turn.trace)
            await prepare(self.pipeline, turn, job.body)
            self._tell_cache(turn)
            self.connection.created(job, turn.response["id"])
            if self.design.appended:
                conversation = await respond_appended(
                    self.pipeline, turn, emit, self._input_of(job), inject=self.connection.inject
                )
            else:
                conversation = await respond(self.pipeline, turn, emit)
            self.replica = conversation.replica
            return Finished(conversation, turn.response["status"], client_calls(turn.response))
        except (WebSocketDisconnect, asyncio.CancelledError, SlowReader):
            if self.slow is not None:
                cut(self.pipeline, turn, self.slow.reason)
            raise
        except StreamFailed:
            return Failed()  # its response.failed was the last event
        except Exception as exc:
            self.send(as_api_error(exc).ws_event(job.stream_id))
            return Failed()

    def _tell_cache(self, turn: ResponseRun) -> None:
        """A learner's cache (``--connection-cache``): the hydration span says whose answer this
        was, and carries the connection's fault, once, on the first response after it."""
        cache = self.connection.cache
        if not isinstance(cache, GuardedCache):
            return
        hydration = next((s for s in turn.trace.spans if s.stage == Stage.HYDRATION), None)
        if hydration is None:
            return
        hydration.detail["learner_cache"] = "yours" if cache.yours else "labkit's"
        fault = cache.take_fault()
        if fault is not None:
            hydration.detail["cache_fault"] = fault.sentence

    def _input_of(self, job: Job) -> NextInput:
        """The appended rollout's way to the client's next ``response.append`` or
        ``response.inject``: taken from the connection, which keeps it until then; waited for
        (``InputReady``) if none is there yet."""
        ready = self.running[job].input_ready

        async def next_input() -> list[Any]:
            while (items := self.connection.take_input(job)) is None:
                ready.clear()
                await ready.wait()
            return items

        return next_input


def client_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The function calls a completed response stopped on: the client runs them (every function
    tool is the client's), so steering input waits for their results."""
    output = response["output"]
    if response["status"] != "completed" or not output or output[-1]["type"] != "function_call":
        return []
    return [item for item in output if item["type"] == "function_call"]


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
    key_limiter: KeyLimiter = state.key_limiter
    door = Door(new_connection=True, authorization=ws.headers.get("authorization"))
    await pipeline.connect(door)
    await pipeline.upgrade(door)
    try:
        await pipeline.authenticate(door)
        owner = door.owner
        # A query string decodes "+" as a space, and a design spec has no spaces: read them back.
        query = (ws.query_params.get(DESIGN_QUERY) or "").replace(" ", "+")
        design = requested_design(ws.headers.get(DESIGN_HEADER) or query, state.ws_design)
        inject = speaks_inject(ws.headers.get(BETA_HEADER))
        if inject and design.prototype_wire:
            raise invalid_request(
                f"The design '{design.name}' speaks response.append, and the {MULTI_AGENT_BETA} beta "
                "response.inject: name the design without prototype_wire, or drop the OpenAI-Beta header.",
                param=DESIGN_HEADER,
                code="invalid_value",
            )
    except APIError as err:
        await deny(ws, err)
        return
    limits = config_of(ws.app).limits
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(key_limiter.connection(owner))  # past the key's cap of open connections: a 429
        except APIError as err:
            await deny(ws, err)
            return
        # What the key's connections hold of their clients' frames, together
        # (labkit.server.wscore.held_bytes).
        by_key = held.enter_context(key_limiter.holding(owner, limits.max_held_bytes_per_key))
        await ws.accept()
        session = WebSocketSession(
            ws,
            pipeline,
            owner,
            design,
            limits,
            key_limiter,
            door.trace.spans,
            held_by_key=by_key,
            inject=inject,
            cache_class=config_of(ws.app).connection_cache,
        )
        try:
            await session.run()
        except Exception:  # never drop the TCP connection without a close frame
            await close(ws, 1011)
