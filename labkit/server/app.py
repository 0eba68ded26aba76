"""The Starlette application: a route table, and the resources opened in its lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute

from labkit.api.errors import APIError, server_error
from labkit.designs import DEFAULT_HTTP, DEFAULT_WEBSOCKET, select_design
from labkit.engine.catalogue import load_catalogue
from labkit.engine.policies import GenericPolicy
from labkit.engine.timing import calibrate
from labkit.profiles import load_profile
from labkit.server import http
from labkit.server.config import ServerConfig
from labkit.server.edge.auth import KeyLimiter, Keys, RequestsPerKey
from labkit.server.edge.shutdown import ShutdownNotice
from labkit.server.edge.timer import raise_resolution, restore_resolution
from labkit.server.stages.pipeline import Pipeline
from labkit.server.stores.billing import LEDGER_BUSY_TIMEOUT_S, Ledger
from labkit.server.stores.database import Database
from labkit.server.stores.shared_traces import SHARED_TRACES_BUSY_TIMEOUT_S, SharedFeed, SharedTraces
from labkit.server.stores.store import ResponseStore
from labkit.server.stores.trace_stream import stream_traces
from labkit.server.stores.traces import TraceStore
from labkit.server.ws.websocket import websocket_endpoint
from labkit.text.tokenizer import encoding

ROUTES = [
    Route("/v1/responses", http.create_response, methods=["POST"]),
    WebSocketRoute("/v1/responses", websocket_endpoint),
    Route("/v1/responses/compact", http.compact_endpoint, methods=["POST"]),
    Route("/v1/responses/{response_id}", http.retrieve_response, methods=["GET"]),
    Route("/v1/responses/{response_id}", http.delete_response, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/input_items", http.list_input_items, methods=["GET"]),
    Route("/v1/models", http.list_models, methods=["GET"]),
    Route("/v1/labkit/traces", http.get_traces, methods=["GET"]),
    Route("/v1/labkit/traces/stream", stream_traces, methods=["GET"]),
    Route("/healthz", http.health, methods=["GET"]),
]


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    err = APIError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", type=kind)
    return JSONResponse(err.body(), status_code=exc.status_code)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    """Every endpoint's refusal: an ``APIError`` raised anywhere in it is its answer."""
    assert isinstance(exc, APIError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _crash(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(server_error().body(), status_code=500)


def create_app(config: ServerConfig | None = None) -> Starlette:
    config = config or ServerConfig()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The store, the ledger and the shared traces each have a connection (and a thread) of
        # their own: a statement waiting for the file holds up only its own kind of work.
        database = Database(config.db)
        # ":memory:" is a database of each connection's own: there the ledger shares the store's.
        memory = config.db == ":memory:"
        ledger = database if memory else Database(config.db, busy_timeout_s=LEDGER_BUSY_TIMEOUT_S)
        databases = [database] if memory else [database, ledger]
        shared = None
        if config.trace_room:
            databases.append(traces_db := Database(config.db, busy_timeout_s=SHARED_TRACES_BUSY_TIMEOUT_S))
            shared = SharedTraces(traces_db, config.trace_room, config.limits.max_traces)
        encoding()  # load the tokenizer now, not on the first request
        app.state.pipeline = Pipeline(
            load_catalogue(config.models),
            load_profile(config.profile, config.data_dir),
            ResponseStore(database),
            Ledger(ledger),
            # An instructor's key is a key too, where keys are required.
            keys=Keys(config.api_keys + config.instructor_keys if config.api_keys else []),
            data_dir=config.data_dir,
            traces=TraceStore(config.limits.max_traces, shared, config.limits.max_trace_history_bytes),
            policy=GenericPolicy(max_output_tokens=config.limits.max_output_tokens),
            slots_per_key=config.limits.max_slots_per_key,
        )
        if shared is not None:  # a subscriber on one worker sees every worker's responses
            app.state.pipeline.feed = SharedFeed(shared)
        # Trace streams never end by themselves: they end when the server begins to stop.
        app.state.shutdown.listen(app.state.pipeline.feed.close)
        app.state.http_design = select_design(config.design, DEFAULT_HTTP)
        app.state.ws_design = select_design(config.design, DEFAULT_WEBSOCKET)
        app.state.instructors = {Keys().owner(f"Bearer {key}") for key in config.instructor_keys}
        fine_timer = raise_resolution()  # Windows: 1 ms ticks, so a 4 ms hop does not take 16 ms
        await calibrate()  # the loop's timer step, measured now rather than in the first request
        try:
            yield
        finally:
            try:
                app.state.shutdown.forget(app.state.pipeline.feed.close)
                app.state.pipeline.feed.close()  # its reader of the shared table stops before the file closes
                await app.state.pipeline.billing.drain()  # at most billing.DRAIN_S, and never raises
            finally:
                for db in databases:
                    db.close()
                if fine_timer:
                    restore_resolution()

    app = Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        exception_handlers={APIError: _api_error, HTTPException: _http_error, Exception: _crash},
        middleware=[Middleware(RequestsPerKey)],
    )
    app.state.config = config  # read through labkit.server.config.config_of
    limits = config.limits
    app.state.key_limiter = KeyLimiter(limits.max_connections_per_key, limits.max_requests_per_key)
    app.state.shutdown = ShutdownNotice()  # given by labkit.server.edge.shutdown.Server as it begins to stop
    return app
