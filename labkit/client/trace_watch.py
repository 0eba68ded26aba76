"""Watch the server's traces as they happen (``GET /v1/labkit/traces/stream``), from a thread.

    with TraceWatcher(server.base_url, api_key="sk-local", on_trace=print) as watcher:
        ...                                  # any client using this key (an instructor's: any key)
    watcher.traces                           # every trace received, in arrival order

Each trace is one finished response: ``response_id``, ``design``, ``model``,
``status`` and its ``spans`` (an instructor also sees ``owner``, a label of the
key). ``on_trace`` runs on the watcher's thread; hand the work to the main
thread from there if it must happen there (a notebook can use its event loop's
``call_soon_threadsafe``).

With ``history=True`` the server first sends the finished responses it keeps, oldest first
(``?history=true``: a dashboard opened late starts with the room since it began), then the live
ones; ``start`` returns once that history has arrived (``caught_up``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

import httpx

from labkit.api.extensions import HISTORY_QUERY, LIVE_COMMENT, TRACES_PATH

STREAM_PATH = TRACES_PATH + "/stream"


class TraceWatcher:
    """A subscription to ``/v1/labkit/traces/stream`` read on a thread of its own.

        with TraceWatcher(server.base_url, "sk-local", on_trace=lambda t: print(t["design"])):
            client.responses.create(model="labkit-spark", input="Hi.")
    """

    def __init__(
        self,
        base_url: str,
        api_key: str = "sk-labkit-agent",
        on_trace: Callable[[dict[str, Any]], None] | None = None,
        *,
        history: bool = False,
    ) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.on_trace = on_trace
        self.history = history
        self.traces: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.caught_up = threading.Event()  # set once every trace received from now on is live
        self._subscribed = threading.Event()
        self._stopping = threading.Event()
        self._response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, name="labkit-trace-watcher", daemon=True)

    def start(self, timeout: float = 10.0) -> TraceWatcher:
        """Subscribe; returns once the server has confirmed the subscription and, with
        ``history``, sent the history (or ``timeout`` seconds later: the rest then keeps arriving)."""
        self._thread.start()
        if not self._subscribed.wait(timeout) or self.error is not None:
            self.stop()
            raise RuntimeError(f"could not subscribe to {STREAM_PATH}: {self.error or 'no answer'}")
        self.caught_up.wait(timeout)
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._response is not None:
            # Shutting the socket down wakes the thread blocked reading it (closing would not).
            stream = self._response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        timeout = httpx.Timeout(10.0, read=None)
        params = {HISTORY_QUERY: "true"} if self.history else None
        try:
            with (
                httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout) as http,
                http.stream("GET", STREAM_PATH, params=params) as response,
            ):
                response.raise_for_status()
                self._response = response
                for line in response.iter_lines():
                    if line.startswith(":"):
                        self._subscribed.set()  # the server's first comment confirms it
                        if not self.history or line == LIVE_COMMENT:
                            self.caught_up.set()
                    elif line.startswith("data: "):
                        trace = json.loads(line[len("data: ") :])
                        self.traces.append(trace)
                        if self.on_trace is not None:
                            self.on_trace(trace)
        except (httpx.HTTPError, RuntimeError, OSError) as exc:
            if not self._stopping.is_set():
                self.error = exc
        finally:
            self._subscribed.set()
            self.caught_up.set()

    def __enter__(self) -> TraceWatcher:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
