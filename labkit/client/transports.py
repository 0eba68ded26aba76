"""Transports: how one agent turn reaches the server, one per design.

- ``StatelessHTTP`` (naive, sprint): the official SDK over HTTP with SSE; the
  whole conversation every turn, ``store=false``; optionally a new connection
  per request.
- ``WebSocketMode`` (websocket): the official SDK's ``responses.connect()``;
  ``previous_response_id`` and only the new items.
- ``AppendedRollout`` (appended): the official SDK's beta connection
  (``beta.responses.connect()``, the multi-agent beta); the first turn creates
  the response, later turns inject the tool outputs into it (``response.inject``).
- ``PrototypeRollout`` (appended+prototype_wire): a raw WebSocket client for
  labkit's reconstruction of the prototype's wire; later turns append to the
  paused response (``response.append``).

Every transport times its turn on the client's clock (``time.perf_counter``,
the system's monotonic clock, which the server's spans use too) and returns
the same ``TurnResult``.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol

from openai import DefaultHttpxClient, OpenAI
from openai.types.beta.beta_response import BetaResponse
from openai.types.beta.beta_response_inject_event import BetaResponseInjectEvent
from openai.types.beta.beta_response_output_message import BetaResponseOutputMessage
from websockets.sync.client import ClientConnection, connect

from labkit.api.event_types import (
    DELTA_EVENTS,
    ERROR,
    INJECT_FAILED,
    OUTPUT_ITEM_DONE,
    RESPONSE_APPEND,
    RESPONSE_CREATE,
    RESPONSE_CREATED,
    RESPONSE_DONE,
    RESPONSE_INJECT,
    TERMINAL_EVENTS,
)
from labkit.api.extensions import DESIGN_HEADER, DESIGN_QUERY
from labkit.api.inject import BETA_HEADER, MULTI_AGENT_BETA
from labkit.api.items import Item
from labkit.designs import Design, compose


class TurnFailed(RuntimeError):
    """A turn ended without a response: the server's error (its ``code``, e.g.
    ``previous_response_not_found``, where it gave one) or a stream that ended early.

    >>> failed = failure({"type": "error", "error": {"code": "previous_response_not_found", "message": "?"}})
    >>> failed.code, str(failed)
    ('previous_response_not_found', 'previous_response_not_found: ?')
    """

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def failure(event: Any) -> TurnFailed:
    """``TurnFailed`` for an ``error`` (or ``response.inject.failed``) event, the SDK's typed
    object or a raw frame's dict, with the error's code: at the top of an HTTP stream's error,
    under ``error`` on a socket."""
    fields = event.model_dump(mode="json") if hasattr(event, "model_dump") else dict(event)
    error = fields.get("error") if isinstance(fields.get("error"), dict) else fields
    code, message = error.get("code"), error.get("message")
    return TurnFailed(f"{code}: {message}" if code else json.dumps(fields), code)


@dataclass
class TurnResult:
    response_id: str
    output: list[Item]
    sent: float
    build: tuple[float, float] | None = None  # the client building and handing over the request
    first_delta: float | None = None
    last_delta: float | None = None
    done: float = 0.0
    usage: dict[str, Any] | None = None
    status: str = "completed"


@dataclass
class TurnRequest:
    """What the agent has for a turn; each transport sends the part its design sends."""

    model: str
    instructions: str
    tools: list[Item]
    history: list[Item]  # everything so far, including ``new``
    new: list[Item]  # the items since the previous turn
    metadata: dict[str, str] = field(default_factory=dict)
    prompt_cache_key: str | None = None
    # The client lost its connection before this turn (WebSocket mode): a new socket, whose cache
    # is empty, so the turn sends the whole history, as after the 60-minute limit or a dropped network.
    reconnect: bool = False


class Transport(Protocol):
    design: str

    def turn(self, request: TurnRequest) -> TurnResult: ...

    def close(self) -> None: ...


class _Timer:
    """Stamps the first and last delta of a turn as events arrive."""

    def __init__(self) -> None:
        self.sent = time.perf_counter()
        self.build_start = self.sent
        self.built: float | None = None
        self.first: float | None = None
        self.last: float | None = None

    def building(self) -> None:
        """The client starts building the request (after opening a socket, say)."""
        self.build_start = time.perf_counter()

    def request_left(self, *_: object) -> None:
        """The request is handed to the network (an httpx request hook, too)."""
        self.built = self.built or time.perf_counter()

    def see(self, kind: str) -> None:
        if kind in DELTA_EVENTS:
            now = time.perf_counter()
            self.first = self.first or now
            self.last = now

    def result(self, response: Item, output: list[Item] | None = None) -> TurnResult:
        return TurnResult(
            response_id=response["id"],
            output=output if output is not None else response["output"],
            sent=self.sent,
            build=(self.build_start, self.built) if self.built else None,
            first_delta=self.first,
            last_delta=self.last,
            done=time.perf_counter(),
            usage=response.get("usage"),
            status=response.get("status", "completed"),
        )


def _create_body(request: TurnRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "instructions": request.instructions,
        "tools": request.tools,
        "store": False,
        "metadata": request.metadata,
    }
    if request.prompt_cache_key:
        body["prompt_cache_key"] = request.prompt_cache_key
    return body


# ---------------------------------------------------------------- HTTP


class StatelessHTTP:
    """The whole history over HTTP every turn (naive and sprint)."""

    def __init__(
        self, base_url: str, api_key: str, design: str = "naive", *, fresh_connection: bool = False
    ) -> None:
        self.design = design
        self.base_url, self.api_key = base_url, api_key
        self.fresh_connection = fresh_connection
        self._client: OpenAI | None = None
        self._timer: _Timer | None = None

    def _open(self) -> OpenAI:
        return OpenAI(
            base_url=self.base_url,
            api_key=self.api_key,
            max_retries=0,
            default_headers={DESIGN_HEADER: self.design},
            http_client=DefaultHttpxClient(event_hooks={"request": [self._request_left]}),
        )

    def _request_left(self, request: object) -> None:
        if self._timer is not None:
            self._timer.request_left()

    def turn(self, request: TurnRequest) -> TurnResult:
        timer = self._timer = _Timer()
        client = self._open() if self.fresh_connection or self._client is None else self._client
        if not self.fresh_connection:
            self._client = client
        try:
            result = None
            # Read the stream to its end, so the connection goes back to the pool for the next turn.
            with client.responses.create(
                stream=True, input=request.history, **_create_body(request)
            ) as stream:
                for event in stream:
                    timer.see(event.type)
                    if event.type in TERMINAL_EVENTS:
                        result = timer.result(event.response.model_dump(mode="json"))
                    elif event.type == ERROR:
                        raise failure(event)
            if result is None:
                raise TurnFailed("the stream ended without a terminal event")
            return result
        finally:
            if self.fresh_connection:
                client.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


# ---------------------------------------------------------------- WebSocket mode


class WebSocketMode:
    """One socket through the official SDK; follow-ups send only new items."""

    def __init__(self, base_url: str, api_key: str, design: str = "websocket") -> None:
        self.design = design
        self._client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        self._socket = ExitStack()  # holds the open socket; closing it closes the socket
        self._conn: Any = None
        self._previous: str | None = None

    def turn(self, request: TurnRequest) -> TurnResult:
        timer = _Timer()
        if request.reconnect and self._conn is not None:
            self._socket.close()
            self._conn, self._previous = None, None  # nothing to continue from on the new socket
        if self._conn is None:  # the socket opens within the turn, as HTTP's first connection does
            connect = self._client.responses.connect(extra_headers={DESIGN_HEADER: self.design})
            self._conn = self._socket.enter_context(connect)
        timer.building()
        body = _create_body(request)
        if self._previous is None:
            self._conn.response.create(input=request.history, **body)
        else:
            self._conn.response.create(input=request.new, previous_response_id=self._previous, **body)
        timer.request_left()
        for event in self._conn:
            timer.see(event.type)
            if event.type in TERMINAL_EVENTS:
                result = timer.result(event.response.model_dump(mode="json"))
                self._previous = result.response_id
                return result
            if event.type == ERROR:
                raise failure(event)
        raise TurnFailed("the socket closed before a terminal event")

    def close(self) -> None:
        self._socket.close()
        self._conn = None
        self._client.close()


# ---------------------------------------------------------------- the appended design


# The beta's models a rollout makes or reads whose validators pydantic builds on first use.
BETA_MODELS_USED = (BetaResponseInjectEvent, BetaResponse, BetaResponseOutputMessage)


class AppendedRollout:
    """One response per rollout through the official SDK's beta connection: the first turn
    creates it, each later turn injects the tool outputs (``response.inject``).

    The inject goes out as the SDK's own event object (``connection.send(BetaResponseInjectEvent
    (...))``), the same frame as ``connection.response.inject(...)``, whose preparation through
    the beta's parameter types costs several milliseconds a turn (``docs/appended.md``): that
    is the SDK's convenience, not the wire's.

    A turn ends at a function call's ``response.output_item.done``: the response waits for its
    output then (labkit's server sends no other sign; ``docs/appended.md``). A segment that
    samples several calls is several turns, one call each, as the server counts them.
    """

    def __init__(self, base_url: str, api_key: str, design: str = "appended") -> None:
        self.design = design
        self._client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        # The beta's modules load on first use (most of a second, once a process), and the SDK
        # builds its beta models' validators the first time one is made or read (another 0.4 s):
        # both here, before any turn is timed, not within the first rollout's turns.
        self._beta = self._client.beta.responses
        for model in BETA_MODELS_USED:
            model.model_rebuild()
        self._socket = ExitStack()  # holds the open socket; closing it closes the socket
        self._conn: Any = None
        self._response_id: str | None = None

    def turn(self, request: TurnRequest) -> TurnResult:
        timer = _Timer()
        if self._conn is None:  # the socket opens within the first turn
            headers = {BETA_HEADER: MULTI_AGENT_BETA, DESIGN_HEADER: self.design}
            connect = self._beta.connect(extra_headers=headers)
            self._conn = self._socket.enter_context(connect)
        timer.building()
        if self._response_id is None:
            self._conn.response.create(input=request.history, **_create_body(request))
        else:
            inject = BetaResponseInjectEvent(
                type=RESPONSE_INJECT, response_id=self._response_id, input=request.new
            )
            self._conn.send(inject)
        timer.request_left()
        output: list[Item] = []
        for event in self._conn:
            timer.see(event.type)
            if event.type == RESPONSE_CREATED:
                self._response_id = event.response.id
            elif event.type == OUTPUT_ITEM_DONE:
                output.append(event.item.model_dump(mode="json", exclude_unset=True))
                if output[-1]["type"] == "function_call":  # the response waits for its output
                    return timer.result({"id": self._response_id, "status": "in_progress"}, output)
            elif event.type in TERMINAL_EVENTS:
                return timer.result(event.response.model_dump(mode="json"), output)
            elif event.type in (ERROR, INJECT_FAILED):
                raise failure(event)
        raise TurnFailed("the socket closed before the turn ended")

    def close(self) -> None:
        self._socket.close()
        self._conn = None
        self._client.close()


class PrototypeRollout:
    """labkit's reconstruction of the prototype's wire over a raw WebSocket (no SDK knows it):
    one response per rollout, paused with ``response.done``, resumed with ``response.append``."""

    def __init__(self, base_url: str, api_key: str, design: str = "appended+prototype_wire") -> None:
        self.design = design
        url = base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        self._url, self._api_key = f"{url}/responses?{DESIGN_QUERY}={design}", api_key
        self._ws: ClientConnection | None = None
        self._response_id: str | None = None

    def turn(self, request: TurnRequest) -> TurnResult:
        timer = _Timer()
        if self._ws is None:  # the socket opens within the first turn
            self._ws = connect(
                self._url, additional_headers={"Authorization": f"Bearer {self._api_key}"}, max_size=None
            )
        timer.building()
        if self._response_id is None:
            self._send({"type": RESPONSE_CREATE, "input": request.history, **_create_body(request)})
        else:
            self._send({"type": RESPONSE_APPEND, "response_id": self._response_id, "input": request.new})
        timer.request_left()
        output: list[Item] = []
        while True:
            assert self._ws is not None
            event = json.loads(self._ws.recv())
            kind = event["type"]
            timer.see(kind)
            if kind == RESPONSE_CREATED:
                self._response_id = event["response"]["id"]
            elif kind == OUTPUT_ITEM_DONE:
                output.append(event["item"])
            elif kind == RESPONSE_DONE:  # paused on tool calls: this turn is over
                return timer.result({"id": event["response_id"], "status": "requires_action"}, output)
            elif kind in TERMINAL_EVENTS:
                return timer.result(event["response"], output)
            elif kind == ERROR:
                raise failure(event)

    def _send(self, frame: dict[str, Any]) -> None:
        assert self._ws is not None
        self._ws.send(json.dumps(frame))

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()


def open_transport(
    design: str | Design, base_url: str, api_key: str, *, fresh_connection: bool = False
) -> Transport:
    """The transport a design's client uses: the whole history over HTTP, WebSocket mode, or
    the appended rollout (on the SDK's beta wire, or the prototype's). ``design``: a ``Design``,
    a name or a composed spec.

    >>> type(open_transport("websocket+no_connection_cache", "http://127.0.0.1:9/v1", "k")).__name__
    'StatelessHTTP'
    >>> type(open_transport("appended+prototype_wire", "http://127.0.0.1:9/v1", "k")).__name__
    'PrototypeRollout'
    """
    if isinstance(design, str):
        design = compose(design)  # a name or a composed spec; a bad one is a DesignSpecError
    if design.prototype_wire:
        return PrototypeRollout(base_url, api_key, design.name)
    if design.appended:
        return AppendedRollout(base_url, api_key, design.name)
    if design.transport == "websocket":
        return WebSocketMode(base_url, api_key, design.name)
    return StatelessHTTP(base_url, api_key, design.name, fresh_connection=fresh_connection)
