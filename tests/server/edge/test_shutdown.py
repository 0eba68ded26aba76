"""Stopping ``labkit serve``: SIGTERM ends every trace stream, bills every response, exits with 0.

A trace subscription never ends by itself, so the server ends it the moment its shutdown
begins (before uvicorn waits for open connections), then drains its overlapped billing queue.
Checked on real servers, one process and two workers, with subscribers that stay open.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from labkit.api.sse import frame
from labkit.client.launcher import LabkitServer
from labkit.server.edge.shutdown import ShutdownNotice
from labkit.server.stores.trace_stream import TraceFeed, _events

pytestmark = pytest.mark.slow  # servers stopped mid-stream

KEY = "sk-labkit-shutdown"
MODEL = "labkit-spark"
HANG_BOUND_S = 8.0  # a bound on hanging, not a timing: a healthy shutdown takes well under a second
SHUTTING_DOWN = ": server shutting down"


class Subscription:
    """A trace subscriber (httpx, streaming) that reads on a thread until the server ends its stream."""

    def __init__(self, base_url: str, key: str = KEY) -> None:
        self.url = f"{base_url}/labkit/traces/stream"
        self.key = key
        self.lines: list[str] = []
        self.error: BaseException | None = None
        self.ended = threading.Event()
        self._subscribed = threading.Event()
        threading.Thread(target=self._read, name="trace-subscriber", daemon=True).start()
        assert self._subscribed.wait(10), "the server did not confirm the subscription"

    def _read(self) -> None:
        timeout = httpx.Timeout(10.0, read=None)  # stays open for as long as the server keeps it
        try:
            with (
                httpx.Client(timeout=timeout) as http,
                http.stream("GET", self.url, headers={"Authorization": f"Bearer {self.key}"}) as reply,
            ):
                reply.raise_for_status()
                for line in reply.iter_lines():
                    self.lines.append(line)
                    self._subscribed.set()
        except BaseException as exc:  # anything but a clean end of the stream is the test's failure
            self.error = exc
        finally:
            self._subscribed.set()
            self.ended.set()

    def traces(self) -> list[str]:
        """The response ids of the traces received, in order."""
        return [
            json.loads(line[len("data: ") :])["response_id"]
            for line in self.lines
            if line.startswith("data: ")
        ]


def ws_turn(ws: ClientConnection, text: str) -> str:
    """One response in WebSocket mode (its billing is overlapped); returns its id."""
    ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": text, "store": False}))
    while True:
        event = json.loads(ws.recv(timeout=30))
        assert event["type"] != "error", event
        if event["type"] == "response.completed":
            return event["response"]["id"]


def billed(db: Path) -> dict[str, int]:
    """Ledger rows per response id."""
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT response_id, COUNT(*) FROM billing GROUP BY response_id").fetchall())


@pytest.fixture(params=[1, 2], ids=["one-process", "two-workers"])
def server(request: pytest.FixtureRequest, slow_billing: Path, tmp_path: Path) -> Iterator[LabkitServer]:
    srv = LabkitServer(
        db=tmp_path / "ledger.sqlite3", workers=request.param, args=["--profile", str(slow_billing)]
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def test_sigterm_ends_open_trace_streams_and_bills_every_response(server: LabkitServer) -> None:
    # With workers, each new connection goes to either one: several of each, so both get some.
    subscriptions = [Subscription(server.base_url) for _ in range(2 * server.workers)]
    ids: list[str] = []
    with ExitStack() as sockets:
        connections = [
            sockets.enter_context(
                connect(server.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"})
            )
            for _ in range(2 * server.workers)
        ]
        for turn in range(3):
            ids += [ws_turn(ws, f"Say hello {turn}.") for ws in connections]
        # Right after the last completion, sockets still open, charges still on their way.
        assert server.process is not None
        started = time.monotonic()
        server.process.terminate()  # SIGTERM
        status = server.process.wait(timeout=30)
        stopped_in = time.monotonic() - started

    assert status == 0
    assert stopped_in < HANG_BOUND_S
    for subscription in subscriptions:
        assert subscription.ended.wait(5) and subscription.error is None  # a clean end, not a reset
        assert [line for line in subscription.lines if line][-1] == SHUTTING_DOWN
        assert set(subscription.traces()) <= set(ids)
    # The streams ended as the shutdown began: nothing was left for uvicorn to cancel.
    assert not [line for line in server.log if "graceful shutdown exceeded" in line], list(server.log)
    assert billed(server.db) == dict.fromkeys(ids, 1)  # every response once, none lost at exit


def test_a_subscriber_gets_every_trace_before_its_stream_ends(slow_billing: Path, tmp_path: Path) -> None:
    with LabkitServer(db=tmp_path / "ledger.sqlite3", args=["--profile", str(slow_billing)]) as server:
        subscription = Subscription(server.base_url)
        with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {KEY}"}) as http:
            ids = [
                http.post("/responses", json={"model": MODEL, "input": f"Hi {i}."}, timeout=30).json()["id"]
                for i in range(3)
            ]
        server.stop()  # SIGTERM, as LabkitServer always stops it
        assert server.process is not None and server.process.returncode == 0
    assert subscription.ended.wait(5) and subscription.error is None
    assert subscription.traces() == ids  # each published before the end, none lost to it
    lines = [line for line in subscription.lines if line]
    assert lines[0] == ": subscribed" and lines[-1] == SHUTTING_DOWN


# ---------------------------------------------------------------- the mechanism, in process


async def _read_stream(feed: TraceFeed, owner: str, during: Any) -> list[bytes]:
    """Every chunk of one subscriber's stream; ``during(feed)`` runs once it is subscribed."""
    subscriber = feed.subscribe(owner)
    chunks = []
    async for chunk in _events(feed, subscriber):
        chunks.append(chunk)
        if len(chunks) == 1:
            during(feed)
    return chunks


def test_closing_the_feed_ends_each_stream_after_the_events_it_holds() -> None:
    trace = {"type": "trace", "response_id": "resp_1"}

    def publish_then_close(feed: TraceFeed) -> None:
        feed.publish("key_a", trace)
        feed.close()
        feed.publish("key_a", {**trace, "response_id": "resp_late"})  # after the end: never sent

    feed = TraceFeed()
    chunks = asyncio.run(asyncio.wait_for(_read_stream(feed, "key_a", publish_then_close), 5))
    assert chunks == [b": subscribed\n\n", frame(trace), SHUTTING_DOWN.encode() + b"\n\n"]
    assert feed.subscribers == set()  # the ended stream unsubscribed itself


def test_a_stream_opened_after_the_close_ends_at_once() -> None:
    feed = TraceFeed()
    feed.close()
    chunks = asyncio.run(asyncio.wait_for(_read_stream(feed, "key_a", lambda feed: None), 5))
    assert chunks == [b": subscribed\n\n", SHUTTING_DOWN.encode() + b"\n\n"]


def test_the_end_of_a_stream_survives_a_full_queue() -> None:
    feed = TraceFeed()
    subscriber = feed.subscribe("key_a")
    for i in range(subscriber.queue.maxsize):
        feed.publish("key_a", {"type": "trace", "response_id": f"resp_{i}"})
    feed.close()
    for i in range(subscriber.queue.maxsize):  # a flood after the close pushes nothing out
        feed.publish("key_a", {"type": "trace", "response_id": f"resp_late_{i}"})
    events = [subscriber.queue.get_nowait() for _ in range(subscriber.queue.qsize())]
    assert events[-1] is None and all(e is not None and "late" not in e["response_id"] for e in events[:-1])


def test_the_notice_reaches_listeners_once_and_late_ones_at_once() -> None:
    notice, heard = ShutdownNotice(), []
    notice.listen(lambda: heard.append("first"))
    forgotten = lambda: heard.append("forgotten")  # noqa: E731
    notice.listen(forgotten)
    notice.forget(forgotten)
    notice.begin()
    notice.begin()
    notice.listen(lambda: heard.append("late"))
    assert heard == ["first", "late"]
