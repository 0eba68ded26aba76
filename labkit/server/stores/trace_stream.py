"""labkit extension: ``GET /v1/labkit/traces/stream``, every finished response's spans as they happen.

A subscriber gets one server-sent event per response its key made, the moment
the response finishes, whoever sent it: a notebook, an SDK, an agent in a
terminal. An instructor's key (``labkit serve --instructor-key``) sees every
key's responses, each marked with a short label of its key, never the key.

    event: trace
    data: {"type": "trace", "response_id": "resp_…", "design": "websocket", "model": "labkit-spark",
           "status": "completed", "finished_at": 1767225600.25, "session": "session-3f9a1c",
           "name": "Ada", "previous_response_id": null, "spans": [{"stage": "uplink", "start": …, …}, …]}

``finished_at`` is the wall clock (Unix seconds) when the response finished, for "last seen";
span times are on the server's monotonic clock. ``session`` is a short digest of the request's
``prompt_cache_key`` (null without one), so the responses of one rollout can be told apart from
another's without showing the key a client chose. ``name`` is the request's
``metadata.labkit_name`` (null without one): what a learner called themselves, shown beside the
label an instructor sees. With ``labkit serve --workers N`` a subscriber
on any worker sees the responses of every worker (``labkit.server.stores.shared_traces``).

With ``?history=true`` the stream first replays the finished responses the server keeps
(``TraceStore.history``: in memory, or the room's shared table), oldest first and labelled as
the live ones are, then a ``: live`` comment line, then the live events: a dashboard opened late
starts with the room since it began. The history ends at the last event kept when the
subscription began (``Subscriber.after``) and the live events start after it, so each arrives once.

A subscriber that reads too slowly loses its oldest live events, not the server's
memory (each queue holds ``QUEUE_SIZE`` events; the history is read ``BATCH`` events at a
time, as fast as the subscriber takes them), and a comment line every
``HEARTBEAT_S`` keeps idle connections open through proxies. When the server
begins to shut down every stream ends, after the events it holds and a last
comment line, so a subscriber never holds up a shutdown (``TraceFeed.close``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from labkit.api.errors import APIError, invalid_request
from labkit.api.extensions import HISTORY_QUERY, LIVE_COMMENT
from labkit.api.owners import NAME_KEY, owner_label
from labkit.api.sse import frame
from labkit.server.stores.traces import BATCH, FinishedTraces

INSTRUCTORS_ENV = "LABKIT_INSTRUCTOR_KEYS"
QUEUE_SIZE = 256
HEARTBEAT_S = 10.0
END_OF_STREAM = None  # queued last by ``Subscriber.close``: the stream ends once it is read
LIVE = f"{LIVE_COMMENT}\n\n".encode()  # after the history: what follows finishes from now on


def instructor_keys_from_env() -> list[str]:
    """``LABKIT_INSTRUCTOR_KEYS=key1,key2``: keys that may watch every key's traces."""
    return [k.strip() for k in os.environ.get(INSTRUCTORS_ENV, "").split(",") if k.strip()]


def asks_for_history(value: str | None) -> bool:
    """The ``history`` query parameter: ``true`` or ``false`` (the default); anything else is a 400.

    >>> asks_for_history(None), asks_for_history("true"), asks_for_history("false")
    (False, True, False)
    """
    if value in (None, "false"):
        return False
    if value == "true":
        return True
    raise invalid_request(f"Invalid '{HISTORY_QUERY}': expected 'true' or 'false'.", param=HISTORY_QUERY)


def session_label(prompt_cache_key: str | None) -> str | None:
    """A short, stable name for a ``prompt_cache_key`` that does not reveal it (None for none).

    >>> session_label("labkit-0123") == session_label("labkit-0123") != session_label(None)
    True
    """
    if not prompt_cache_key:
        return None
    return "session-" + hashlib.sha256(prompt_cache_key.encode()).hexdigest()[:6]


@dataclass(eq=False)  # each subscription is its own: compared and hashed by identity
class Subscriber:
    owner: str
    sees_everyone: bool
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))
    dropped: int = 0
    closed: bool = False
    after: int = 0  # the last finished event kept when it subscribed: its history ends there

    def may_see(self, owner: str) -> bool:
        """Whether ``owner``'s traces reach this subscriber: its own, or an instructor's everyone's."""
        return self.sees_everyone or owner == self.owner

    def as_seen(self, owner: str, trace: dict[str, Any]) -> dict[str, Any]:
        """``owner``'s trace as this subscriber receives it: another key's labelled, never the key.

        >>> teacher = Subscriber("key_t", sees_everyone=True)
        >>> teacher.as_seen("key_t", {"response_id": "r"}), teacher.as_seen("key_a", {})["owner"][:8]
        ({'response_id': 'r'}, 'learner-')
        """
        return trace if owner == self.owner else {**trace, "owner": owner_label(owner)}

    def offer(self, event: dict[str, Any]) -> None:
        if not self.closed:  # nothing may follow the end of the stream (nor push it out)
            self._put(event)

    def close(self) -> None:
        """End the stream: the events already queued are sent, then nothing more."""
        if not self.closed:
            self._put(END_OF_STREAM)
            self.closed = True

    def _put(self, event: dict[str, Any] | None) -> None:
        if self.queue.full():  # a slow reader loses its oldest event, not the server's memory
            self.queue.get_nowait()
            self.dropped += 1
        self.queue.put_nowait(event)


class TraceFeed:
    """The subscribers of one server process, and what each may see."""

    def __init__(self) -> None:
        self.subscribers: set[Subscriber] = set()
        self.closed = False

    def subscribe(self, owner: str, *, sees_everyone: bool = False, after: int = 0) -> Subscriber:
        """A new subscriber, handed what is published from now on; ``after`` is where its history
        ends (``FinishedTraces.last()``, read with no await between it and this call)."""
        subscriber = Subscriber(owner, sees_everyone, after=after)
        self.subscribers.add(subscriber)
        if self.closed:  # subscribed while the server shuts down: its stream ends at once
            subscriber.close()
        return subscriber

    def close(self) -> None:
        """End every subscriber's stream, and any later one's: the server is shutting down.

        >>> feed = TraceFeed(); watching = feed.subscribe("key_a")
        >>> feed.close(); watching.queue.get_nowait() is END_OF_STREAM
        True
        """
        self.closed = True
        for subscriber in list(self.subscribers):
            subscriber.close()

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    def publish(self, owner: str, trace: dict[str, Any]) -> None:
        """Hand a finished response's trace to every subscriber allowed to see it."""
        self.deliver(owner, trace, list(self.subscribers))

    @staticmethod
    def deliver(owner: str, trace: dict[str, Any], subscribers: list[Subscriber]) -> None:
        """``owner``'s trace to those of ``subscribers`` that may see it, labelled for an instructor."""
        for subscriber in subscribers:
            if subscriber.may_see(owner):
                subscriber.offer(subscriber.as_seen(owner, trace))


async def stream_traces(request: Request) -> Response:
    """``GET /v1/labkit/traces/stream``: this key's traces (an instructor: everyone's), as SSE;
    ``?history=true``: the finished ones kept first."""
    pipeline = request.app.state.pipeline
    try:
        owner = pipeline.keys.owner(request.headers.get("authorization"))
        history = asks_for_history(request.query_params.get(HISTORY_QUERY))
    except APIError as err:
        return JSONResponse(err.body(), status_code=err.status)
    kept: FinishedTraces = pipeline.traces.history
    subscriber = pipeline.feed.subscribe(
        owner, sees_everyone=owner in request.app.state.instructors, after=kept.last()
    )
    return StreamingResponse(
        _events(pipeline.feed, subscriber, kept if history else None),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


async def _events(
    feed: TraceFeed, subscriber: Subscriber, history: FinishedTraces | None = None
) -> AsyncIterator[bytes]:
    try:
        yield b": subscribed\n\n"  # lets the client know the subscription is live
        if history is not None:
            async for chunk in _history(history, subscriber):
                yield chunk
            yield LIVE
        while True:
            try:
                event = await asyncio.wait_for(subscriber.queue.get(), HEARTBEAT_S)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if event is END_OF_STREAM:
                yield b": server shutting down\n\n"
                return  # the response ends cleanly, so its connection closes and the shutdown goes on
            yield frame(event)
    finally:
        with contextlib.suppress(Exception):
            feed.unsubscribe(subscriber)


async def _history(kept: FinishedTraces, subscriber: Subscriber) -> AsyncIterator[bytes]:
    """The events kept up to ``subscriber.after`` that it may see, oldest first, a batch a chunk:
    each chunk waits for the subscriber to take the one before (the transport's flow control)."""
    seq, owner = 0, None if subscriber.sees_everyone else subscriber.owner
    while not subscriber.closed:  # a server shutting down ends the history too
        try:
            rows = kept.after(seq, BATCH, upto=subscriber.after, owner=owner)
        except sqlite3.Error:  # the shared file cannot be read now: the live events still come
            return
        if rows:
            yield b"".join(frame(subscriber.as_seen(row.owner, json.loads(row.event))) for row in rows)
        if len(rows) < BATCH:
            return
        seq = rows[-1].seq


def trace_event(response: dict[str, Any], design: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
    """What a subscriber receives for one finished response."""
    return {
        "type": "trace",
        "response_id": response["id"],
        "design": design,
        "model": response.get("model"),
        "status": response.get("status"),
        "finished_at": time.time(),
        "session": session_label(response.get("prompt_cache_key")),
        "name": (response.get("metadata") or {}).get(NAME_KEY),  # the learner's own, if they gave one
        "previous_response_id": response.get("previous_response_id"),
        "spans": spans,
    }
