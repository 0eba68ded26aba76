"""The server's SQLite file when it misbehaves: locked by another process, or not a usable file.

A lock: another process holds the file's write lock (``BEGIN IMMEDIATE``) for as long as the
test says. A ``store: true`` create then waits for it beside the event loop and ends with
``database_unavailable`` (over HTTP a 503 with ``Retry-After``), not a 500; while it waits,
``/healthz`` and a ``store: false`` create are answered, and the latter's charge reaches the
ledger once the lock is gone. Outcomes and their order are read off the wire and the file,
never the clock.

A bad ``--db`` (random bytes, a text file, a file nothing may write): one line on stderr naming
the file and what is wrong, exit 2, as for every other mistake on the command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from labkit.client.launcher import LabkitServer
from tests.helpers import auth_headers, labkit, one_line_error, root_of, wait_for_rows, ws_connect

pytestmark = pytest.mark.slow  # faults: servers killed and restarted

MODEL = "labkit-spark"
HOLD_AT_MOST_S = 30  # the lock holder lets go by itself after this, whatever the test does
HOLDER = """
import sqlite3, sys, threading
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
timer = threading.Timer(float(sys.argv[2]), lambda: sys.stdin.close())
timer.daemon = True
timer.start()
sys.stdin.readline()  # the test writes a line (or the timer runs out): let go
conn.execute("ROLLBACK")
"""


@contextlib.contextmanager
def lock_held(db: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``db``'s write lock until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), str(HOLD_AT_MOST_S)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        with contextlib.suppress(OSError):
            assert holder.stdin is not None
            holder.stdin.write("go\n")
            holder.stdin.flush()
        holder.wait(timeout=HOLD_AT_MOST_S)


def create(server: LabkitServer, store: bool) -> httpx.Response:
    body = {"model": MODEL, "input": "Say hello.", "store": store}
    return httpx.post(f"{server.base_url}/responses", json=body, headers=auth_headers(), timeout=30)


class StoredOverWebSocket:
    """A ``store: true`` create on a WebSocket, read on a thread: ``decoded`` is set once its
    output is done (the server goes on to store it), and ``order`` gets "stored" the moment its
    last event arrives."""

    def __init__(self, server: LabkitServer, order: list[str]) -> None:
        self.ws = ws_connect(server)
        self.order = order
        self.last: dict[str, Any] = {}
        self.decoded = threading.Event()
        create = {"type": "response.create", "model": MODEL, "input": "Say hi.", "store": True}
        self.ws.send(json.dumps(create))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for _ in range(1000):
            event = json.loads(self.ws.recv(timeout=30))
            if event["type"] == "response.output_item.done":
                self.decoded.set()
            elif event["type"] in ("error", "response.completed", "response.failed"):
                self.order.append("stored")
                self.last = event
                return

    def close(self) -> None:
        self.thread.join(30)
        self.ws.close()


def test_a_locked_database_costs_only_the_requests_that_need_it(tmp_path: Path) -> None:
    db = tmp_path / "room.sqlite3"
    with LabkitServer(db=db, args=["--profile", "local"]) as server:
        assert create(server, store=True).status_code == 200  # the file and its tables exist
        order: list[str] = []
        with lock_held(db):
            stored = StoredOverWebSocket(server, order)
            try:
                assert stored.decoded.wait(30)  # the answer is decoded: the server now stores it
                health = httpx.get(f"{root_of(server)}/healthz", timeout=30)
                order.append("healthz")
                unstored = create(server, store=False)
                order.append("store=false")
            finally:
                stored.close()
            refused = create(server, store=True)  # over HTTP: the same refusal, and a retry hint
        # The old server stored on its event loop: every other request waited behind it.
        assert order == ["healthz", "store=false", "stored"], order
        assert health.status_code == 200
        assert unstored.status_code == 200 and unstored.json()["status"] == "completed", unstored.text
        # Stored just before its terminal event: over WebSocket the response ends failed, saying why.
        assert stored.last["type"] == "response.failed", stored.last
        assert stored.last["response"]["error"]["code"] == "database_unavailable", stored.last
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("server_error", "database_unavailable"), error
        assert "locked" in error["message"] and "locked" in stored.last["response"]["error"]["message"]
        assert refused.status_code == 503 and refused.headers.get("retry-after") == "1", refused.text
        # The lock is gone: a store=true create is stored again, and the blocking charge of the
        # store=false one, kept while the ledger was locked, is in the ledger now.
        assert create(server, store=True).status_code == 200
        rows = wait_for_rows(db, [unstored.json()["id"]])
        assert [row[0] for row in rows[unstored.json()["id"]]] == ["completed"]


# ---------------------------------------------------------------- a bad --db


def read_only(path: Path) -> None:
    """Make ``path`` a file nobody may write: no write permission, and for root (whom permissions
    do not stop) the immutable attribute, where the file system has it."""
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    if os.access(path, os.W_OK) and shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if os.access(path, os.W_OK) or _writable_anyway(path):
        pytest.skip("this user may write any file here (root, without chattr +i)")


def _writable_anyway(path: Path) -> bool:
    try:
        with path.open("ab"):
            return True
    except OSError:
        return False


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "readonly.sqlite3"
    path.write_bytes(b"")  # an empty file is a valid, empty SQLite database
    read_only(path)
    yield path
    subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)


@pytest.mark.parametrize(
    ("content", "fact"),
    [
        (os.urandom(4096), "not a SQLite database"),
        (b"My notes for the workshop.\n" * 20, "not a SQLite database"),
    ],
    ids=["random-bytes", "text-file"],
)
def test_a_db_that_is_not_sqlite_is_one_line_and_exit_2(tmp_path: Path, content: bytes, fact: str) -> None:
    db = tmp_path / "notes.sqlite3"
    db.write_bytes(content)
    result = labkit("serve", "--port", "0", "--db", str(db))
    assert result.returncode == 2
    one_line_error(result, f"--db '{db}'", fact)
    assert db.read_bytes() == content  # looked at, never changed


def test_a_db_nothing_may_write_is_one_line_and_exit_2(unwritable: Path) -> None:
    result = labkit("serve", "--port", "0", "--db", str(unwritable))
    assert result.returncode == 2
    one_line_error(result, f"--db '{unwritable}'", "cannot be written")


def test_a_db_under_a_file_is_one_line_naming_that_file(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("not a folder")
    db = tmp_path / "notes" / "room.sqlite3"
    result = labkit("serve", "--port", "0", "--db", str(db))
    assert result.returncode == 2
    one_line_error(result, f"--db '{db}'", f"'{tmp_path / 'notes'}' is a file")
