"""Several server processes on one port: ``labkit serve --workers N``, for a bigger room.

The parent binds the listening socket as a single server does (``labkit.cli.serve.bind``: TCP_NODELAY,
port 0 resolved before anything is announced), prepares the SQLite file, then forks N workers
that each run the same uvicorn server on that socket; the kernel hands each new connection to
one of them, and the connection stays there. The parent prints the ready line once every
worker serves, then supervises:

- SIGTERM or Ctrl-C (SIGINT) to the parent stops every worker gracefully (each ends its trace
  streams, finishes its connections and drains its billing queue), kills any still running after
  ``GRACE_S``, and exits; the workers have their own process groups, so Ctrl-C reaches the parent only;
- a worker that dies is replaced by a new one (its connections are lost);
- a worker whose parent dies (even by SIGKILL) notices at once, through a pipe whose other
  end only the parent holds, and shuts down by itself;
- with ``--exit-with-parent``, the end of standard input (the parent's own parent is gone)
  stops every worker as SIGTERM does.

Shared between workers, through the SQLite file in WAL mode: stored responses (so
``previous_response_id`` and ``GET /v1/responses/{id}`` work on any worker), the billing
ledger, and finished responses' traces (``labkit.server.stores.shared_traces``: a subscriber to
``/v1/labkit/traces/stream`` on any worker sees every worker's responses, once each and in
order per key, and ``GET /v1/labkit/traces`` finds a finished response on any worker). Each
worker's writes are short transactions, and a writer that finds the file locked waits
(sqlite3's busy timeout) instead of failing, so no row is lost.

Per worker, in memory: WebSocket connections and their caches (a connection never changes
worker), the simulated engine (the profile's replicas, each with its own prefix cache and
``max_concurrent`` slots: N workers simulate N times the GPUs), the render and model-config
caches, the HTTP connection tracker, and the spans of responses still running (another
worker's are a 404 until it finishes, as are ``/v1/responses/compact`` passes': they are not
streamed). Notebooks and ``labkit compare`` time a design on a server; run them on one worker.

Workers are forked rather than spawned: the server object built from the command line (and
the loaded tokenizer) is copied as it is, with no re-import and no pickling. Forking needs a
parent with no other thread, which ``labkit serve`` is.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

GRACE_S = 8.0  # a worker's graceful shutdown before it is killed (LabkitServer waits 10 s)
START_TIMEOUT_S = 60.0  # for every worker to serve (each loads the app: well under a second)


class WorkersError(Exception):
    """The workers could not start (or a replacement could not): one line for the command."""


class _Stop(Exception):
    """SIGTERM reached the parent."""


class _ParentGone(_Stop):
    """The lifeline ended: whoever started ``labkit serve`` has exited."""


@dataclass
class _Worker:
    number: int
    process: BaseProcess
    channel: Connection  # the parent's end: the worker's "serving" message, and its lifeline
    serving: bool = False


def prepare_database(path: str) -> None:
    """Create the file, switch it to WAL and create the tables once, before N workers open it
    at the same moment (changing the journal mode needs the file to itself)."""
    from labkit.server.stores.billing import Ledger
    from labkit.server.stores.database import Database
    from labkit.server.stores.shared_traces import create_table
    from labkit.server.stores.store import ResponseStore

    database = Database(path)
    try:
        ResponseStore(database)
        Ledger(database)
        create_table(database)
    finally:
        database.close()


class Supervisor:
    """Forks ``count`` workers serving ``server`` on ``sock``, replaces those that die, stops them."""

    def __init__(
        self,
        server: Any,  # a uvicorn.Server, not started
        sock: socket.socket,
        count: int,
        *,
        grace_s: float = GRACE_S,
        start_timeout_s: float = START_TIMEOUT_S,
        lifeline: int | None = None,
    ) -> None:
        self.server = server
        self.sock = sock
        self.count = count
        self.grace_s = grace_s
        self.start_timeout_s = start_timeout_s
        # A descriptor whose end means the parent of ``labkit serve`` is gone (--exit-with-parent).
        self.lifeline = lifeline
        self.workers: list[_Worker] = []
        self._context = multiprocessing.get_context("fork")

    def start(self) -> None:
        """Fork every worker and wait until each one serves; ``WorkersError`` if one cannot."""
        for number in range(1, self.count + 1):
            self.workers.append(self._fork(number))  # one by one: each fork sees the ends before it
        deadline = time.monotonic() + self.start_timeout_s
        while not all(worker.serving for worker in self.workers):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkersError(f"the workers did not start within {self.start_timeout_s:g} s")
            self._step(remaining)

    def supervise(self) -> None:
        """Replace workers that die, until a signal (``_Stop``, ``KeyboardInterrupt``) ends it."""
        while True:
            self._step(None)

    def _step(self, timeout: float | None) -> None:
        """Wait for one thing to happen: a worker serving, a worker ending, or the lifeline ending."""
        watched: dict[Any, _Worker] = {}
        for worker in self.workers:
            watched[worker.process.sentinel] = worker
            if not worker.serving:
                watched[worker.channel] = worker
        extra = [] if self.lifeline is None else [self.lifeline]
        for ready in wait(list(watched) + extra, timeout):
            if ready not in watched:  # the lifeline: anything written is ignored, only its end counts
                if not os.read(ready, 65536):
                    raise _ParentGone
                continue
            worker = watched[ready]
            if ready is worker.channel:
                with contextlib.suppress(EOFError, OSError):  # EOF: it died; its sentinel says so
                    worker.channel.recv()
                    worker.serving = True
            elif not worker.process.is_alive():
                self._replace(worker)

    def _replace(self, worker: _Worker) -> None:
        code = worker.process.exitcode
        worker.channel.close()
        if not worker.serving:  # it failed while starting: a new one would fail the same way
            raise WorkersError(
                f"worker {worker.number} exited with code {code} before serving (its output is above)"
            )
        print(
            f"labkit: worker {worker.number} (pid {worker.process.pid}) exited with code {code}; "
            "starting another",
            file=sys.stderr,
            flush=True,
        )
        self.workers[self.workers.index(worker)] = self._fork(worker.number)

    def _fork(self, number: int) -> _Worker:
        parent_end, child_end = self._context.Pipe(duplex=True)
        # The parent's ends of every pipe, which the worker must close: as long as any worker
        # held a copy, another worker would not see its lifeline end when the parent dies.
        parents_ends = [w.channel for w in self.workers if not w.channel.closed] + [parent_end]
        process = self._context.Process(
            target=_worker_main,
            args=(self.server, self.sock, child_end, parents_ends),
            name=f"labkit-worker-{number}",
            daemon=True,  # should the parent fail, multiprocessing's exit handler stops it
        )
        process.start()
        child_end.close()
        return _Worker(number, process, parent_end)

    def stop(self) -> None:
        """SIGTERM every worker, wait up to ``grace_s`` for all of them, kill the rest."""
        for worker in self.workers:
            if worker.process.is_alive():
                worker.process.terminate()
        deadline = time.monotonic() + self.grace_s
        for worker in self.workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in self.workers:
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.channel.close()


def serve_workers(
    server: Any, sock: socket.socket, count: int, db: str, ready_line: str, *, lifeline: int | None = None
) -> bool:
    """Run ``count`` workers of ``server`` on ``sock`` until SIGTERM or Ctrl-C, or until the pipe
    on the descriptor ``lifeline`` ends; ``ready_line`` is printed once all of them serve. Returns
    after every worker has stopped: True if the lifeline stopped them.

        serve_workers(server, sock, 2, "responses.sqlite3", ready_line, lifeline=0)  # stdin
    """
    if not hasattr(os, "fork"):
        raise WorkersError("--workers needs a system that can fork processes (Linux, macOS)")
    from labkit.text.tokenizer import encoding

    encoding()  # loaded once here, shared by the forked workers instead of loaded by each
    prepare_database(db)
    supervisor = Supervisor(server, sock, count, lifeline=lifeline)
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    interrupted = parent_gone = False
    try:
        supervisor.start()
        print(ready_line, flush=True)
        supervisor.supervise()
    except _ParentGone:
        parent_gone = True
    except _Stop:
        pass
    except KeyboardInterrupt:
        interrupted = True
    finally:
        # Stopping is bounded by GRACE_S; a second signal must not cut it short and orphan workers.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            supervisor.stop()
        finally:
            sock.close()
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted:
        raise KeyboardInterrupt
    return parent_gone


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


# ---------------------------------------------------------------- in a worker


def _worker_main(
    server: Any, sock: socket.socket, channel: Connection, parents_ends: list[Connection]
) -> None:
    for end in parents_ends:
        end.close()
    os.setpgid(0, 0)  # out of the terminal's process group: Ctrl-C goes to the parent only
    # uvicorn stops gracefully on SIGTERM/SIGINT, then raises the signal again for the handler
    # that was there before it: exit quietly then (status 0, no KeyboardInterrupt traceback).
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_quietly)
    # uvicorn would wait for a client that never closes its connection without end, and the
    # parent kills a worker after GRACE_S: stop waiting at half of it, so the app's shutdown
    # (draining the billing queue) still runs in time.
    if server.config.timeout_graceful_shutdown is None:
        server.config.timeout_graceful_shutdown = GRACE_S / 2
    asyncio.run(_serve(server, sock, channel))


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


async def _serve(server: Any, sock: socket.socket, channel: Connection) -> None:
    loop = asyncio.get_running_loop()
    # Only the parent holds the other end, and never writes: readable means the parent is gone.
    loop.add_reader(channel.fileno(), _orphaned, server, loop, channel)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.01)
    if server.started:
        channel.send(os.getpid())
    await task


def _orphaned(server: Any, loop: asyncio.AbstractEventLoop, channel: Connection) -> None:
    loop.remove_reader(channel.fileno())
    server.should_exit = True
