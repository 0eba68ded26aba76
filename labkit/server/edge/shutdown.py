"""Stopping the server: streams that never end by themselves end the moment it begins to stop.

uvicorn stops (SIGTERM, Ctrl-C, or ``should_exit`` set) by closing its listening sockets,
asking every connection to close once its response is done, waiting for them (at most
``timeout_graceful_shutdown``, then it cancels what still runs), and only then running the
app's lifespan shutdown, which drains the overlapped billing queue. A trace subscription's
response is never done by itself, so it would hold the shutdown up until its reader left.

``Server`` tells the app when the shutdown begins, before that wait, through the app's
``ShutdownNotice``: its listeners (the trace feed) end their streams, those connections
close, and the shutdown goes on at once.

    app = create_app(config)
    server = Server(uvicorn.Config(app, timeout_graceful_shutdown=5), app.state.shutdown)
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import uvicorn

from labkit.server.edge.wire_limits import handle_accept_errors

Listener = Callable[[], None]


class ShutdownNotice:
    """Tells its listeners, once, that the server has begun to shut down.

    >>> notice, heard = ShutdownNotice(), []
    >>> notice.listen(lambda: heard.append("trace feed"))
    >>> notice.begin(); notice.begin()
    >>> heard, notice.begun
    (['trace feed'], True)
    """

    def __init__(self) -> None:
        self.begun = False
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)
        if self.begun:  # listening late: the shutdown has begun already
            listener()

    def forget(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def begin(self) -> None:
        if not self.begun:
            self.begun = True
            for listener in list(self._listeners):
                listener()


class Server(uvicorn.Server):
    """uvicorn's server, which gives notice as its shutdown begins (runs on the event loop)."""

    def __init__(self, config: uvicorn.Config, notice: ShutdownNotice) -> None:
        super().__init__(config)
        self.notice = notice

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        handle_accept_errors(asyncio.get_running_loop())  # out of descriptors: said once, not per accept
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.notice.begin()  # before uvicorn waits for open connections: streams must end first
        await super().shutdown(sockets)
