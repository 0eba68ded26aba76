"""Start ``labkit serve`` as a subprocess on a free port, wait until it is ready, stop it.

    with LabkitServer() as server:
        client = OpenAI(base_url=server.base_url, api_key="sk-local")

The server runs in its own process so that notebook kernels and test code do
not share its event loop or distort its timings. This is the client's side: it
runs the ``labkit`` command as a user would, and imports nothing of the server. Everything here is
synchronous and blocks only on the subprocess, so it works inside a running
event loop (a Jupyter kernel) without patching asyncio.

In a notebook, the server outlives an Interrupt and dies with its kernel: it
runs in a process group (session) of its own, so the SIGINT a front end sends
to the kernel's group does not reach it; and with ``exit_with_parent`` (the
default) it runs ``labkit serve --exit-with-parent``, whose standard input is a
pipe only this process holds: when the kernel exits, however (even SIGKILL, or
a restart), the pipe ends, the server shuts down as on SIGTERM and removes the
temporary folder of its database.
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any

from labkit.client.room import client_key

READY = re.compile(r"labkit: serving on (http://\S+)/v1")


class ServerStartError(RuntimeError):
    pass


class LabkitServer:
    """A ``labkit serve`` subprocess; use as a context manager or call ``start``/``stop``.

        with LabkitServer(args=["--profile", "local"]) as server:
            client = OpenAI(base_url=server.base_url, api_key="sk-local")

        server = LabkitServer().start()      # in a notebook: start in one cell ...
        server.close()                       # ... and stop in the last one

    ``connection_cache=MyCache`` runs ``labkit serve --connection-cache`` with that class (a
    learner's, from a notebook cell: ``labkit.client.learner_source`` writes it as a module).
    ``workers=N`` runs ``labkit serve --workers N`` (see ``labkit.server.edge.workers``);
    ``processes()`` lists the server's process ids, workers included. With
    ``exit_with_parent`` (the default) the server stops by itself once this process
    has exited, even if it was killed, and removes the temporary database folder.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        db: str | os.PathLike | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 30.0,
        workers: int = 1,
        exit_with_parent: bool = True,
        connection_cache: type | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.workers = workers  # server processes on the port (``labkit serve --workers``)
        self.exit_with_parent = exit_with_parent  # ``labkit serve --exit-with-parent``
        self._tmp: tempfile.TemporaryDirectory | None = None
        if db is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="labkit-")
            db = Path(self._tmp.name) / "responses.sqlite3"
        self.db = Path(db)
        self.args = list(args or [])
        self.connection_cache = connection_cache  # a learner's class, for --connection-cache
        self._source_tmp: tempfile.TemporaryDirectory | None = None
        self.env = env
        self.timeout = timeout
        self.url: str | None = None
        self.process: subprocess.Popen[str] | None = None
        self.log: deque[str] = deque(maxlen=200)
        self.api_key = client_key()  # what this process's clients send (``$LABKIT_API_KEY``)
        self.shared = False  # a server of this process's own (``RoomServer`` is the shared kind)

    @property
    def base_url(self) -> str:
        """The ``base_url`` an OpenAI client takes, e.g. ``http://127.0.0.1:40123/v1``."""
        if self.url is None:
            raise RuntimeError("the server is not running")
        return f"{self.url}/v1"

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://", 1) + "/responses"

    def start(self) -> LabkitServer:
        # A notebook kernel that is restarted or closed must not leave the server running.
        atexit.register(self.close)
        cmd = [sys.executable, "-m", "labkit", "serve", "--host", self.host, "--port", str(self.port)]
        cmd += ["--db", str(self.db), *self.args]
        if self.connection_cache is not None:
            cmd += ["--connection-cache", f"{self._cache_module()}:{self.connection_cache.__name__}"]
        if self.workers > 1:
            cmd += ["--workers", str(self.workers)]
        if self.exit_with_parent:
            cmd += ["--exit-with-parent"]
            if self._tmp is not None:
                cmd += ["--remove-with-parent", self._tmp.name]
        env = {**os.environ, **(self.env or {}), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            cmd,
            # The lifeline: only this process holds the other end (never written), so it ends with it.
            stdin=subprocess.PIPE if self.exit_with_parent else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            **_own_process_group(),
        )
        ready = threading.Event()
        threading.Thread(target=self._pump, args=(ready,), daemon=True).start()
        deadline = time.monotonic() + self.timeout
        while not ready.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                output = "\n".join(self.log)
                raise ServerStartError(f"labkit serve did not start:\n{output}")
        return self

    def _cache_module(self) -> Path:
        """The learner's class as a module, in the server's temporary folder (it goes with it)."""
        from labkit.client.learner_source import write_module

        if self._tmp is not None:
            folder = Path(self._tmp.name)
        else:
            if self._source_tmp is None:
                self._source_tmp = tempfile.TemporaryDirectory(prefix="labkit-cache-")
            folder = Path(self._source_tmp.name)
        assert self.connection_cache is not None
        return write_module(self.connection_cache, folder)

    def _pump(self, ready: threading.Event) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line.rstrip())
            match = READY.search(line)
            if match and not ready.is_set():
                self.url = match.group(1)
                ready.set()

    def processes(self) -> list[int]:
        """The server's process ids: ``labkit serve`` first, then its workers (with ``workers``).

        Workers are found in /proc (Linux); elsewhere only the first id is known.
        """
        if self.process is None or self.process.poll() is not None:
            return []
        return [self.process.pid, *_children(self.process.pid)]

    def stop(self) -> None:
        """Ask the server to shut down (SIGTERM), then kill it if it has not within 10 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()  # only now: before, the server would take it for this process's end
        self.url = None

    def restart(self) -> LabkitServer:
        """Stop and start again on the same database (a new port unless one was fixed)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        atexit.unregister(self.close)
        self.stop()
        for folder in (self._tmp, self._source_tmp):
            if folder is not None:
                folder.cleanup()
        self._tmp = self._source_tmp = None

    def __enter__(self) -> LabkitServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _own_process_group() -> dict[str, Any]:
    """Popen's arguments for a process group of the server's own, so that the SIGINT a notebook's
    Interrupt sends to the kernel's group (or Ctrl-C to a terminal's) does not stop it.

        subprocess.Popen(cmd, **_own_process_group())
    """
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def _children(pid: int) -> list[int]:
    """Ids of the live processes whose parent is ``pid``, from /proc (empty elsewhere)."""
    if not Path("/proc/self/stat").exists():
        return []
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()  # the name, in (), may hold spaces
        except (OSError, IndexError):
            continue  # ended meanwhile
        if int(fields[1]) == pid and fields[0] != "Z":  # fields: state, parent id, ...
            found.append(int(entry.parent.name))
    return sorted(found)
